"""A tool that asks a model itself is not a sub-agent: a SIGKILL right after its outside
commit does not run it again (both backends).

``send_summary`` (graph_inner_task.py) has ``ChatOpenAI`` summarize a text, then commits a
mail outside and is killed. Its model call is the tool's own (in the tool call's namespace,
not in a graph of its own): nothing of it is checkpointed, so the cut-off call is not one
that may run again. At its default mark the thread pauses for a person, who sees the call,
and settles it; the mail is sent once."""

from __future__ import annotations

import json
import time
from pathlib import Path

import deep_agent_task as d
import graph_inner_task as g
from conftest import run_cli
from fakes import FakeOpenAI

from longtask import Runner

HERE = Path(__file__).resolve().parent
TASK = f"{HERE / 'graph_inner_task.py'}:task"


def test_a_tool_that_asks_a_model_is_not_run_again(db_url: str, tmp_path: Path) -> None:
    thread = "mail-1"
    outside = tmp_path / "outside.db"
    with FakeOpenAI(g.script) as server:
        env = {
            "OPENAI_API_KEY": "sk-test-inner-kill",
            "OPENAI_BASE_URL": server.base_url,
            d.OUTSIDE_ENV: str(outside),
            "LT_KILL_AT": "send_summary:after",
            "LT_CRASH_MARKER": str(tmp_path / "crashed"),
        }
        first = run_cli("run", TASK, "--thread", thread, db=db_url, env=env)
        assert first.returncode == -9, first.stdout + first.stderr  # SIGKILL
        assert [tool for _, tool, _, _ in d.rows(outside)] == ["send_summary"]
        deadline = time.monotonic() + 10
        with Runner(db_url) as runner:
            while runner.status(thread).active and time.monotonic() < deadline:
                time.sleep(0.05)

        second = run_cli("resume", thread, db=db_url, env=env)
        # the cut-off call waits for a person, who sees it: not sent a second time
        assert second.returncode == 3, second.stdout + second.stderr
        assert [tool for _, tool, _, _ in d.rows(outside)] == ["send_summary"]
        with Runner(db_url) as runner:
            (pause,) = runner.pending(thread)
        assert pause.kind == "effect", pause
        (tool_call_id,) = {i for i, *_ in d.rows(outside)}
        assert pause.request["tool_call_id"] == tool_call_id
        assert pause.request["args"]["args"] == {"text": "the report"}

        result = json.dumps(d.lookup(tool_call_id, outside))
        key = pause.request["key"]
        third = run_cli(
            "effects", "resolve", thread, key, "--succeeded", "--result", result, db=db_url, env=env
        )
        assert third.returncode == 0, third.stdout + third.stderr
    assert len(d.rows(outside)) == 1
    with Runner(db_url) as runner:
        assert runner.result(thread, "mail") == "Sent."
