"""A tool call that finished is not run again after a kill (both backends): the model asks
for two tool calls in one turn of a graph step's agent; ``quick`` returns, and the process
is SIGKILLed while ``slow`` (marked idempotent) still runs. ``longtask resume`` runs ``slow``
again and not ``quick``, whose result was stored when it returned (see graph_sibling_task.py)."""

from __future__ import annotations

import time
from pathlib import Path

import counter
from conftest import run_cli
from fakes import FakeOpenAI, Reply, by_turn

from longtask import Runner

HERE = Path(__file__).resolve().parent
TASK = HERE / "graph_sibling_task.py"


def test_a_finished_sibling_tool_call_is_not_run_again_after_a_kill(
    db_url: str, tmp_path: Path
) -> None:
    thread = "graph-sibling"
    script = by_turn(
        [Reply.tool_calls([("quick", {"x": 1}), ("slow", {"x": 2})]), Reply.text("done")]
    )
    with FakeOpenAI(script) as server:
        env = {
            "OPENAI_API_KEY": "sk-test-sibling-kill",
            "OPENAI_BASE_URL": server.base_url,
            counter.ENV_VAR: str(tmp_path / "calls.db"),
            "LT_CRASH_MARKER": str(tmp_path / "crashed"),
        }
        first = run_cli("run", f"{TASK}:task", "--thread", thread, db=db_url, env=env)
        assert first.returncode == -9, first.stdout + first.stderr  # SIGKILL
        assert counter.counts(tmp_path / "calls.db") == {"quick": 1, "slow": 1}
        deadline = time.monotonic() + 10
        with Runner(db_url) as runner:
            while runner.status(thread).active and time.monotonic() < deadline:
                time.sleep(0.05)
        second = run_cli("resume", thread, db=db_url, env=env)
        assert second.returncode == 0, second.stdout + second.stderr
        # slow ran again (cut off, and idempotent); quick, which had returned, did not
        assert counter.counts(tmp_path / "calls.db") == {"quick": 1, "slow": 2}
        assert len(server.requests) == 2
    with Runner(db_url) as runner:
        assert runner.result(thread, "turn") == "done"
