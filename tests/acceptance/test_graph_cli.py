"""Graph steps that pause, driven from the CLI in separate processes (both backends): a
graph's own ``interrupt()`` and its ``interrupt_before`` stop are pauses of kind
``interrupt``; ``run`` ends with exit code 3, ``pending`` and ``status`` show them with the
command that answers each, and ``resume --interrupt ID --resume JSON`` answers one at a
time, recording who answered."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli

HERE = Path(__file__).resolve().parent
TASK_REF = f"{HERE / 'graph_task.py'}:GRAPH_PAUSE"


def test_graph_interrupts_are_answered_from_the_cli(db_url: str) -> None:
    thread = "graph-cli"
    first = run_cli("run", TASK_REF, "--thread", thread, db=db_url)
    assert first.returncode == 3, first.stdout + first.stderr

    shown = run_cli("pending", thread, db=db_url)
    assert shown.returncode == 0, shown.stderr
    assert "asks (interrupt, interrupt " in shown.stdout
    assert "how much to add?" in shown.stdout
    assert "stopped before: tools" in shown.stdout

    status = json.loads(run_cli("status", thread, "--json", db=db_url).stdout)
    assert status["status"] == "waiting_user"
    waiting = {w["step"]: w for w in status["waiting"]}
    assert set(waiting) == {"asks", "stops"}
    assert waiting["asks"]["value"] == {"question": "how much to add?", "n": 1}
    asks_id = waiting["asks"]["interrupt_id"]
    assert f"--interrupt {asks_id} --resume JSON" in waiting["asks"]["command"]

    # not JSON: refused, nothing changes
    bad = run_cli("resume", thread, "--interrupt", asks_id, "--resume", "{add", db=db_url)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    answered = run_cli(
        "resume", thread, "--interrupt", asks_id, "--resume", '{"add": 41}', "--by", "ana",
        db=db_url,
    )  # fmt: skip
    assert answered.returncode == 3, answered.stdout + answered.stderr  # the stop still waits
    status = json.loads(run_cli("status", thread, "--json", db=db_url).stdout)
    assert [w["step"] for w in status["waiting"]] == ["stops"]

    done = run_cli("resume", thread, "--interrupt", "stops", "--resume", "{}", db=db_url)
    assert done.returncode == 0, done.stdout + done.stderr
    inner = run_cli("history", thread, "--inner", "asks", "--json", db=db_url)
    assert inner.returncode == 0, inner.stderr
    # one checkpoint per super-step of the graph: its input, the input applied, first,
    # ask (answered); the interrupt added none
    assert [c["step"] for c in json.loads(inner.stdout)] == [2, 1, 0, -1]
    not_graph = run_cli("history", thread, "--inner", "nope", db=db_url)
    assert not_graph.returncode == 1 and "not a graph step" in not_graph.stderr
    results = json.loads(run_cli("result", thread, "--all", "--json", db=db_url).stdout)
    assert results["asks"] == {"n": 42, "trail": ["first", "ask"]}
    assert results["stops"] == 11
    out = run_cli("events", thread, "--json", db=db_url).stdout
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    resolved = [e for e in events if e["kind"] == "interrupt.resolved"]
    assert [(e["step"], e["data"]["value"]) for e in resolved] == [
        ("asks", {"add": 41}),
        ("stops", {}),
    ]
    assert resolved[0]["data"]["by"] == "ana"
    assert resolved[1]["data"]["by"]  # this user
