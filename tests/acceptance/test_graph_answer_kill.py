"""An accepted answer to a graph's ``interrupt()`` is durable (both backends): the graph
asks, a person answers with ``longtask resume --interrupt ID --resume``, and the process
is SIGKILLed in the tool the answer goes to, before anything of that node is stored. A
plain ``longtask resume`` then goes on with the answer: the question is not asked again."""

from __future__ import annotations

import time
from pathlib import Path

import counter
from conftest import run_cli

from longtask import Runner

HERE = Path(__file__).resolve().parent
TASK = HERE / "graph_answer_task.py"


def _wait_inactive(db_url: str, thread: str) -> None:
    deadline = time.monotonic() + 10
    with Runner(db_url) as runner:
        while runner.status(thread).active and time.monotonic() < deadline:
            time.sleep(0.05)


def test_an_accepted_answer_survives_a_kill(db_url: str, tmp_path: Path) -> None:
    thread = "graph-answer"
    calls = tmp_path / "calls.db"
    env = {counter.ENV_VAR: str(calls), "LT_CRASH_MARKER": str(tmp_path / "crashed")}
    first = run_cli("run", f"{TASK}:task", "--thread", thread, db=db_url, env=env)
    assert first.returncode == 3, first.stdout + first.stderr  # waiting for an answer
    with Runner(db_url) as runner:
        (pending,) = runner.pending(thread)
    answered = run_cli(
        "resume",
        thread,
        "--interrupt",
        pending.interrupt_id,
        "--resume",
        '"blue"',
        "--by",
        "ann",
        db=db_url,
        env=env,
    )
    assert answered.returncode == -9, answered.stdout + answered.stderr  # SIGKILL
    assert counter.counts(calls) == {"ask": 2, "tool:blue": 1}
    _wait_inactive(db_url, thread)
    again = run_cli("resume", thread, db=db_url, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert counter.counts(calls) == {"ask": 3, "tool:blue": 2}
    with Runner(db_url) as runner:
        assert runner.status(thread).status == "completed"
        assert runner.result(thread, "pick") == {"answer": "blue"}
        asked = runner.events(thread, kinds=["interrupt.required"])
        assert len(asked) == 1
        (resolved,) = runner.events(thread, kinds=["interrupt.resolved"])
        assert resolved.data["by"] == "ann"
        assert resolved.data["value"] == "blue"
