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


CONTEXT_REF = f"{HERE.parent / 'integration' / 'context_graph.py'}:graph#ctx"


def _draft(thread: str, db: str) -> str:
    status = json.loads(run_cli("status", thread, "--json", db=db).stdout)
    (waiting,) = status["waiting"]
    return str(waiting["value"]["draft"])


def test_the_cli_gives_a_graph_its_run_context(db_url: str, tmp_path: Path) -> None:
    """``run --context`` (also ``@file``) starts a thread with it, ``resume --input
    --context`` gives a new input its own; a context that is no object, or one given to a
    resume that continues the thread, is refused (exit 2) before anything is stored."""
    thread = "graph-context"
    bad = run_cli(
        "run", CONTEXT_REF, "--thread", thread, "--input", '{"topic": "tides"}',
        "--context", '["hi"]', db=db_url,
    )  # fmt: skip
    assert bad.returncode == 2 and "must be a JSON object" in bad.stderr, bad.stderr
    assert run_cli("status", thread, db=db_url).returncode != 0  # no thread was made

    given = tmp_path / "context.json"
    given.write_text('{"greeting": "hi"}')
    first = run_cli(
        "run", CONTEXT_REF, "--thread", thread, "--input", '{"topic": "tides"}',
        "--context", f"@{given}", db=db_url,
    )  # fmt: skip
    assert first.returncode == 3, first.stdout + first.stderr
    assert _draft(thread, db_url) == "hi tides (small)"

    refused = run_cli("resume", thread, "--resume", '"ok"', "--context", "{}", db=db_url)
    assert refused.returncode == 2 and "goes with --input" in refused.stderr, refused.stderr
    done = run_cli("resume", thread, "--resume", '"ok"', db=db_url)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(run_cli("result", thread, "--all", "--json", db=db_url).stdout)
    assert results["ctx"]["final"] == "hi tides (small) / ok / hi / hi"

    again = run_cli(
        "resume", thread, "--input", '{"topic": "waves"}', "--context", '{"model": "large"}',
        db=db_url,
    )  # fmt: skip
    assert again.returncode == 3, again.stdout + again.stderr
    assert _draft(thread, db_url) == "hello waves (large)"
