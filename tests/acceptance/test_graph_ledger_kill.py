"""A tool call of a graph step's LangChain agent is never repeated after a kill (both
backends), whether its author wrapped the tool in ``ledgered`` or left the agent unchanged
(the graph step's ledger is under every ToolNode call): the process dies inside the agent's
tools node after ``charge`` succeeded; ``longtask resume`` runs the node again, and
``charge`` returns its recorded result instead of charging twice. The model is the real
``ChatOpenAI`` client against the scripted OpenAI-compatible server. The same with tools that
are coroutines (the graph runs on LangGraph's async API, and the ledger around the async
tool)."""

from __future__ import annotations

import time
from pathlib import Path

import counter
import pytest
from conftest import run_cli
from fakes import FakeOpenAI, Reply, by_turn

from longtask import Runner

HERE = Path(__file__).resolve().parent
TASK = HERE / "graph_ledger_task.py"


@pytest.mark.parametrize(
    "task",
    ["task", "atask", "ptask", "patask"],
    ids=["sync-ledgered", "async-ledgered", "sync-unchanged", "async-unchanged"],
)
def test_a_ledgered_tool_call_is_not_repeated_after_a_kill(
    db_url: str, tmp_path: Path, task: str
) -> None:
    thread = "graph-ledger"
    script = by_turn(
        [
            Reply.tool_calls([("charge", {"cents": 250}), ("crash", {"reason": "x"})]),
            Reply.text("paid"),
        ]
    )
    with FakeOpenAI(script) as server:
        env = {
            "OPENAI_API_KEY": "sk-test-ledger-kill",
            "OPENAI_BASE_URL": server.base_url,
            counter.ENV_VAR: str(tmp_path / "calls.db"),
            "LT_CRASH_MARKER": str(tmp_path / "crashed"),
        }
        first = run_cli("run", f"{TASK}:{task}", "--thread", thread, db=db_url, env=env)
        assert first.returncode == -9, first.stdout + first.stderr  # SIGKILL
        assert counter.counts(tmp_path / "calls.db") == {"charge": 1, "crash": 1}
        deadline = time.monotonic() + 10
        with Runner(db_url) as runner:
            while runner.status(thread).active and time.monotonic() < deadline:
                time.sleep(0.05)
        second = run_cli("resume", thread, db=db_url, env=env)
        assert second.returncode == 0, second.stdout + second.stderr
        # the tools node ran again: crash twice, charge from the ledger
        assert counter.counts(tmp_path / "calls.db") == {"charge": 1, "crash": 2}
        # the model's request with the two tool calls was not made again
        assert len(server.requests) == 2
    with Runner(db_url) as runner:
        assert runner.result(thread, "pay") == "paid"
        (effect,) = runner.effects(thread)
        assert (effect.name, effect.status) == ("tool:charge", "succeeded")
        assert len(runner.events(thread, kinds=["model.call"])) == 2
