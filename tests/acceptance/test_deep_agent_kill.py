"""A LangChain deep agent (``create_deep_agent``), unchanged, as a graph step: a SIGKILL inside
its sub-agent, in its tool right after the tool's outside commit or before its first model
call, repeats no tool call and no model call and asks no person (both backends).

The process dies in ``book_flight``, a tool of the ``booker`` sub-agent that the main
agent's ``task`` tool runs, after the booking was committed outside and before the tool
returned. ``longtask resume`` runs the main agent's tools node again: ``book_hotel`` (the
sibling call of the same turn, which had returned) gives its recorded result, and ``task``
runs again, so LangGraph runs the sub-agent again in the namespace of the same tool task
(its id is the same at the same checkpoint) while the thread is resuming, and the sub-agent
continues from its own last checkpoint instead of starting over: its first model turn is not
asked again, and ``book_flight``, found started in the ledger, is settled by the graph
step's reconcile, which finds the booking by its ``tool_call_id``. The thread then waits for
``refund``'s approval (``interrupt_on``), which ``longtask approve`` gives."""

from __future__ import annotations

import time
from pathlib import Path

import deep_agent_task as d
from conftest import run_cli
from fakes import FakeOpenAI

from longtask import Runner

HERE = Path(__file__).resolve().parent
TASK = f"{HERE / 'deep_agent_task.py'}:task"
#: the same with ``task`` marked ``once`` (a person settles a cut-off call of its own code)
ONCE = f"{HERE / 'deep_agent_task.py'}:once_task"


def _wait_idle(db_url: str, thread: str) -> None:
    deadline = time.monotonic() + 10
    with Runner(db_url) as runner:
        while runner.status(thread).active and time.monotonic() < deadline:
            time.sleep(0.05)


def test_a_kill_in_the_sub_agents_tool_repeats_no_call(db_url: str, tmp_path: Path) -> None:
    thread = "trip-1"
    outside = tmp_path / "outside.db"
    with FakeOpenAI(d.script) as server:
        env = {
            "OPENAI_API_KEY": "sk-test-deep-kill",
            "OPENAI_BASE_URL": server.base_url,
            d.OUTSIDE_ENV: str(outside),
            "LT_KILL_AT": "book_flight:after",
            "LT_CRASH_MARKER": str(tmp_path / "crashed"),
        }
        first = run_cli("run", TASK, "--thread", thread, db=db_url, env=env)
        assert first.returncode == -9, first.stdout + first.stderr  # SIGKILL
        killed = {pid for *_, pid in d.rows(outside)}
        assert [tool for _, tool, _, _ in d.rows(outside)] == ["book_hotel", "book_flight"]
        # the sub-agent had asked its first turn, and nothing after it
        assert [(r.first_text(), r.turn) for r in server.requests] == [
            (d.PLAN.format(trip=thread), 0),
            (d.BOOK.format(trip=thread), 0),
        ]
        _wait_idle(db_url, thread)

        second = run_cli("resume", thread, db=db_url, env=env)
        assert second.returncode == 3, second.stdout + second.stderr  # waits for the refund
        assert "refund" in second.stdout
        third = run_cli("approve", thread, "--by", "alice", db=db_url, env=env)
        assert third.returncode == 0, third.stdout + third.stderr

        # no model request was made twice: the sub-agent went on from its checkpoint
        assert len(server.requests) == d.MODEL_CALLS
        assert all(r.seen == 0 for r in server.requests)
    calls = d.rows(outside)
    # each tool call committed once: book_flight's by the killed process only
    assert sorted(tool for _, tool, _, _ in calls) == sorted(d.SIDE_EFFECTS)
    assert len({i for i, *_ in calls}) == len(calls)
    assert {pid for _, tool, _, pid in calls if tool in ("book_hotel", "book_flight")} == killed
    with Runner(db_url) as runner:
        assert runner.result(thread, "plan") == f"Trip {thread} planned."
        effects = {e.name: e for e in runner.effects(thread)}
        assert {n: e.status for n, e in effects.items()} == {
            f"tool:{n}": "succeeded" for n in ("task", *d.SIDE_EFFECTS)
        }
        # the task call ran again (its sub-agent resumed); book_flight was not
        assert effects["tool:task"].calls == 2
        assert effects["tool:book_flight"].calls == 1
        reconciled = [
            e.data["name"]
            for e in runner.events(thread, kinds=["effect.succeeded"])
            if (e.data or {}).get("reconciled")
        ]
        assert reconciled == ["tool:book_flight"]


def test_a_kill_in_the_sub_agent_before_its_model_asks_no_person(
    db_url: str, tmp_path: Path
) -> None:
    """The process dies in the sub-agent before its first model call (in a middleware's
    ``before_model``), with ``task`` marked ``once``: the ``task`` call had started a graph
    of its own (the sub-agent's first nodes ran and were checkpointed), so it runs again
    and its sub-agent goes on; nobody is asked whether ``task`` happened."""
    thread = "trip-2"
    outside = tmp_path / "outside.db"
    with FakeOpenAI(d.script) as server:
        env = {
            "OPENAI_API_KEY": "sk-test-deep-kill",
            "OPENAI_BASE_URL": server.base_url,
            d.OUTSIDE_ENV: str(outside),
            "LT_KILL_AT": "booker:before_model",
            "LT_CRASH_MARKER": str(tmp_path / "crashed"),
        }
        first = run_cli("run", ONCE, "--thread", thread, db=db_url, env=env)
        assert first.returncode == -9, first.stdout + first.stderr  # SIGKILL
        assert [r.first_text() for r in server.requests] == [d.PLAN.format(trip=thread)]
        _wait_idle(db_url, thread)

        second = run_cli("resume", thread, db=db_url, env=env)
        # what it waits for is the refund's approval, not a person's word on `task`
        assert second.returncode == 3, second.stdout + second.stderr
        with Runner(db_url) as runner:
            (pause,) = runner.pending(thread)
        assert pause.kind == "interrupt", pause
        assert [a["name"] for a in pause.request["actions"]] == ["refund"]
        third = run_cli("approve", thread, "--by", "alice", db=db_url, env=env)
        assert third.returncode == 0, third.stdout + third.stderr
        assert len(server.requests) == d.MODEL_CALLS
        assert all(r.seen == 0 for r in server.requests)
    calls = d.rows(outside)
    assert sorted(tool for _, tool, _, _ in calls) == sorted(d.SIDE_EFFECTS)
    with Runner(db_url) as runner:
        assert runner.result(thread, "plan") == f"Trip {thread} planned."
        effects = {e.name: e for e in runner.effects(thread)}
        assert effects["tool:task"].status == "succeeded"
        assert effects["tool:task"].calls == 2
        assert not runner.events(thread, kinds=["effect.unknown"])
