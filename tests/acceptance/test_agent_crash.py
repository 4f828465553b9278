"""An agent killed in the middle of its conversation resumes at its next model call.

The agent of ``agent_task.py`` makes 10 model calls against the scripted OpenAI-compatible
server (in this process, on 127.0.0.1) through the real ``ChatOpenAI`` client, from a
``longtask run`` subprocess that is killed with SIGKILL after the 6th model call.
``longtask resume`` continues it: the server's request log holds each of the 10 distinct
requests exactly once, and each of the 5 notes (the side effects) was written once.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import agent_task
from conftest import run_cli
from fakes import FakeOpenAI, Reply, by_turn, read_log

from longtask import Runner

HERE = Path(__file__).resolve().parent
KEY = "sk-test-agent-crash-31c4"


def _script() -> list[Reply]:
    replies = []
    for turn in range(agent_task.TURNS - 1):
        if turn % 2 == 0:
            replies.append(Reply.tool_calls([("write_note", {"text": f"note-{turn}"})]))
        else:
            replies.append(Reply.tool_calls([("lookup", {"topic": f"topic-{turn}"})]))
    replies.append(Reply.text("five notes taken"))
    return replies


def test_agent_killed_after_six_model_calls_resumes_at_the_seventh(
    db_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "requests.jsonl"
    notes = tmp_path / "notes.txt"
    with FakeOpenAI(by_turn(_script()), log_path=log) as server:
        env = {
            "OPENAI_API_KEY": KEY,
            "OPENAI_BASE_URL": server.base_url,
            "LT_NOTES": str(notes),
            "LT_KILL_MARKER": str(tmp_path / "killed"),
        }
        ref = f"{HERE / 'agent_task.py'}:task"
        first = run_cli(
            "run",
            ref,
            "--thread",
            "t-agent",
            "--input",
            '{"subject": "durability"}',
            db=db_url,
            env=env,
        )
        assert first.returncode == -signal.SIGKILL, first.stdout + first.stderr
        assert [r.turn for r in read_log(log)] == [0, 1, 2, 3, 4, 5]
        assert notes.read_text().split() == ["note-0", "note-2", "note-4"]

        resumed = run_cli("resume", "t-agent", db=db_url, env=env)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr

    requests = read_log(log)
    assert [r.turn for r in requests] == list(range(agent_task.TURNS))
    assert len(Counter(r.key for r in requests)) == agent_task.TURNS  # distinct, once each
    assert all(r.seen == 0 for r in requests)
    assert all(r.api_key_seen == KEY for r in requests)
    assert notes.read_text().split() == [f"note-{t}" for t in range(0, 9, 2)]
    with Runner(db_url) as runner:
        assert runner.status("t-agent").status == "completed"
        assert runner.result("t-agent", "report") == {"answer": "five notes taken"}
        writes = [e for e in runner.effects("t-agent") if e.name == "tool:write_note"]
        assert len(writes) == 5 and all(e.status == "succeeded" and e.calls == 1 for e in writes)
        calls = [e.data["call"] for e in runner.events("t-agent", kinds=["model.call"])]
        # calls made after the resume are all recorded (the killed process may have lost
        # its last queued events); none is recorded twice
        assert set(range(7, 11)) <= set(calls) and len(calls) == len(set(calls))
