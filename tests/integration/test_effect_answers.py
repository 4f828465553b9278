"""A tool call cut off mid-call, settled by a person through every door, on both backends
(issue 51, item 1: "the thread pauses for a person (``longtask effects resolve``, the page,
Agent Inbox), who sees the call's name, arguments and id").

The agent is an unchanged ``create_agent`` (``booking_task.py``) over ``ChatOpenAI`` against
the scripted server; its booking tool writes to the airline's SQLite database and is cut off
after the commit. The thread pauses on the call (the tool is unmarked: at most once). Then:

- Agent Inbox's answers through the Server API (``command={"resume": [...]}``, as Agent Inbox
  sends them): ``response`` records its text as the tool's result, ``accept`` calls the tool
  again, ``ignore`` fails the step; the interrupt shows Agent Inbox the call (its name,
  arguments, tool_call_id and key) where Agent Inbox reads it;
- an answer of any other shape is a 422 naming the shapes taken, and nothing changes;
- the page's route (``POST /api/threads/T/resolve``) settles it each way, by the same rule of
  who may as every other answer; bad input is a 4xx naming the fix, nothing changed;
- ``pending`` and ``status`` show the call and how to settle it; the CLI's ``resume
  --resume`` takes Agent Inbox's shape too, and ``effects resolve --failed --reason``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import booking_task
import pytest
from fakes import FakeOpenAI, Reply, by_turn
from starlette.testclient import TestClient

from longtask import Runner
from longtask.serve import create_app
from longtask.serve._registry import load_registry

TASK_FILE = Path(__file__).parent / "booking_task.py"
REF = f"{TASK_FILE}:task"
ALICE = {"X-Api-Key": "tok-alice"}
BOB = {"X-Api-Key": "tok-bob"}
VIC = {"X-Api-Key": "tok-vic"}
THREAD = "t-trip"
SCRIPT = [Reply.tool_calls([("book_flight", {"flight": "LX8"})]), Reply.text("all booked")]


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(by_turn(SCRIPT)).start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-effect-answers")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("LT_AIRLINE_DB", str(tmp_path / "airline.db"))
    monkeypatch.setenv("LT_CRASH_MARKER", str(tmp_path / "crashed"))
    monkeypatch.setenv("LT_CRASH", "raise")
    yield server
    server.stop()


def _task() -> Any:
    from longtask.runtime._taskref import load_task

    return load_task(REF)


@pytest.fixture
def paused(db_url: str, llm: FakeOpenAI) -> Iterator[Runner]:
    """alice's thread, waiting for a person to settle its cut-off booking."""
    task = _task()
    with Runner(db_url) as runner:
        # the task is loaded by file reference: its Crash is not this import's class
        with pytest.raises(KeyboardInterrupt):
            runner.start(task, thread_id=THREAD, task_ref=REF, by="alice")
        runner.resume(THREAD, task=task)  # finds the call cut off: pauses
        assert runner.status(THREAD, usage=False).status == "waiting_user"
        yield runner


@pytest.fixture
def client(paused: Runner) -> Iterator[TestClient]:
    tokens = {"tok-alice": "alice", "tok-bob": "bob", "tok-vic": "vic"}
    app = create_app(paused, tokens, roles={"vic": "viewer"}, registry=load_registry([REF]))
    with TestClient(app, headers=ALICE) as c:
        yield c


def _ended(client: TestClient, run_id: str) -> str:
    deadline = time.monotonic() + 60
    while True:
        status = str(client.get(f"/threads/{THREAD}/runs/{run_id}").json()["status"])
        if status not in ("pending", "running"):
            return status
        assert time.monotonic() < deadline, "the run did not end"
        time.sleep(0.02)


def _resume(client: TestClient, value: Any, who: dict[str, str] = ALICE) -> Any:
    """Agent Inbox's answer, as it sends it: a run whose command resumes the thread."""
    got = client.post(
        f"/threads/{THREAD}/runs",
        json={"assistant_id": "trip", "command": {"resume": value}},
        headers=who,
    )
    if got.status_code == 200:
        _ended(client, got.json()["run_id"])
    return got


def _resolve(client: TestClient, body: dict[str, Any], who: dict[str, str] = ALICE) -> Any:
    """The page's route; waits for the run it records to end."""
    got = client.post(f"/api/threads/{THREAD}/resolve", json=body, headers=who)
    if got.status_code == 202 and got.json().get("run_id"):
        _ended(client, got.json()["run_id"])
    return got


def _tool_reply(server: FakeOpenAI) -> list[str]:
    """What the model was last told the tool answered."""
    return [m["content"] for m in server.requests[-1].messages if m.get("role") == "tool"]


def _unchanged(runner: Runner) -> tuple[Any, ...]:
    """What a refused answer must leave as it was."""
    return (
        runner.status(THREAD, usage=False).status,
        [(p.interrupt_id, p.request["key"]) for p in runner.pending(THREAD)],
        [(e.key, e.status) for e in runner.effects(THREAD)],
        len(runner.events(THREAD)),
        booking_task.bookings(),
    )


def test_agent_inbox_sees_the_cut_off_call_where_it_reads_interrupts(
    client: TestClient, paused: Runner
) -> None:
    ((flight, tool_call_id),) = booking_task.bookings()
    (intr,) = client.get(f"/threads/{THREAD}/state").json()["interrupts"]
    value = intr["value"]
    (effect,) = paused.effects(THREAD)
    assert value["kind"] == "effect" and value["key"] == effect.key
    # Agent Inbox's HumanInterrupt: it renders the action and its args, and offers what
    # config allows
    assert value["action_request"] == {
        "action": "tool:book_flight",
        "args": {
            "tool": "book_flight",
            "args": {"flight": flight},
            "tool_call_id": tool_call_id,
            "key": effect.key,
        },
    }
    assert value["config"] == {
        "allow_accept": True,
        "allow_edit": False,
        "allow_respond": True,
        "allow_ignore": True,
    }
    assert tool_call_id in value["description"] and "Respond" in value["description"]
    # the thread as Agent Inbox lists it (threads.search / threads.get): the same value
    thread = client.get(f"/threads/{THREAD}").json()
    assert thread["status"] == "interrupted"
    (listed,) = [i for found in thread["interrupts"].values() for i in found]
    assert listed["value"] == value


ANSWERS: list[tuple[str, Any, str, int, str]] = [
    # (what, Agent Inbox's answer, the thread's status, bookings, what the model is told)
    ("response", [{"type": "response", "args": "booked LX8 as #1"}], "completed", 1, "as #1"),
    ("accept", [{"type": "accept", "args": None}], "completed", 2, "booked LX8 as #2"),
    ("ignore", [{"type": "ignore", "args": None}], "failed", 1, ""),
]


@pytest.mark.parametrize(
    ("what", "answer", "status", "booked", "told"), ANSWERS, ids=[a[0] for a in ANSWERS]
)
def test_each_agent_inbox_answer_does_what_it_says(
    client: TestClient,
    paused: Runner,
    llm: FakeOpenAI,
    what: str,
    answer: Any,
    status: str,
    booked: int,
    told: str,
) -> None:
    assert _resume(client, answer).status_code == 200
    st = paused.status(THREAD, usage=False)
    assert st.status == status
    assert len(booking_task.bookings()) == booked
    (resolved,) = paused.events(THREAD, kinds=["manual.resolve"])
    outcome = {"response": "succeeded", "accept": "retry", "ignore": "failed"}[what]
    assert (resolved.data["outcome"], resolved.data["by"]) == (outcome, "alice")
    if status == "completed":
        assert any(told in reply for reply in _tool_reply(llm))
        assert paused.result(THREAD, "agent") == "all booked"
    else:
        # the person said it failed: the step fails, and says who and why
        assert st.error is not None and "resolved as failed by alice" in st.error["message"]
        assert "ignored in Agent Inbox" in st.error["message"]
        assert len(llm.requests) == 1  # the model was not asked again


BAD: list[tuple[str, Any, str]] = [
    (
        "an edit",
        [{"type": "edit", "args": {"action": "tool:book_flight", "args": {"flight": "LX9"}}}],
        "cannot be edited",
    ),
    ("LangChain's decisions", {"decisions": [{"type": "approve"}]}, "unknown keys"),
    ("two responses", [{"type": "accept"}, {"type": "accept"}], "holds 2 responses"),
    ("a bare word", "done", "does not say what became of the call"),
    ("longtask's own resume", {"resolved": "succeeded"}, "longtask's own"),
]


def test_a_malformed_answer_is_a_422_naming_the_shapes_and_the_pause_stays(
    client: TestClient, paused: Runner, llm: FakeOpenAI
) -> None:
    before = _unchanged(paused)
    (intr,) = client.get(f"/threads/{THREAD}/state").json()["interrupts"]
    for _what, answer, problem in BAD:
        refused = _resume(client, answer)
        assert refused.status_code == 422, refused.text
        text = refused.json()["error"]
        assert problem in text and '[{"type": "accept"}]' in text, text
        assert '{"succeeded": RESULT}' in text, text
        assert _unchanged(paused) == before
        assert client.get(f"/threads/{THREAD}/state").json()["interrupts"] == [intr]
    # an answer given in somebody else's name is refused too
    other = _resume(client, {"retry": True, "by": "mallory"})
    assert other.status_code == 409 and "one's own name" in other.json()["error"]
    # bob may not see alice's thread; a viewer reads it and answers nothing
    assert _resume(client, [{"type": "accept"}], BOB).status_code == 404
    assert _resume(client, [{"type": "accept"}], VIC).status_code == 403
    assert _unchanged(paused) == before
    # a correct answer afterwards settles it
    assert _resume(client, {"succeeded": "booked LX8 as #1"}).status_code == 200
    assert paused.status(THREAD, usage=False).status == "completed"
    assert len(booking_task.bookings()) == 1


OUTCOMES: list[tuple[dict[str, Any], str, int]] = [
    # (the page's body, the thread's status, bookings)
    (
        {"outcome": "succeeded", "result": {"content": "booked LX8 as #1", "status": "success"}},
        "completed",
        1,
    ),
    ({"outcome": "retry"}, "completed", 2),
    ({"outcome": "failed", "reason": "the airline has no such booking"}, "failed", 1),
]


@pytest.mark.parametrize(
    ("body", "status", "booked"), OUTCOMES, ids=[o[0]["outcome"] for o in OUTCOMES]
)
def test_the_pages_route_settles_the_call(
    client: TestClient,
    paused: Runner,
    llm: FakeOpenAI,
    body: dict[str, Any],
    status: str,
    booked: int,
) -> None:
    (effect,) = paused.effects(THREAD)
    done = _resolve(client, {"key": effect.key, **body})
    assert done.status_code == 202, done.text
    st = paused.status(THREAD, usage=False)
    assert st.status == status
    assert len(booking_task.bookings()) == booked
    (resolved,) = paused.events(THREAD, kinds=["manual.resolve"])
    assert (resolved.data["outcome"], resolved.data["by"]) == (body["outcome"], "alice")
    if body["outcome"] == "succeeded":
        assert _tool_reply(llm) == ["booked LX8 as #1"]
    if body["outcome"] == "failed":
        assert resolved.data["reason"] == body["reason"]
        assert st.error is not None and body["reason"] in st.error["message"]


def test_the_pages_route_refuses_bad_input_naming_the_fix_and_changes_nothing(
    client: TestClient, paused: Runner
) -> None:
    (effect,) = paused.effects(THREAD)
    key = effect.key
    before = _unchanged(paused)
    cases: list[tuple[dict[str, Any], dict[str, str], int, str]] = [
        ({"outcome": "retry"}, ALICE, 400, "key"),
        ({"key": key, "outcome": "maybe"}, ALICE, 400, "'succeeded', 'failed' or 'retry'"),
        ({"key": key, "outcome": "retry", "result": 1}, ALICE, 400, 'outcome "succeeded"'),
        ({"key": key, "outcome": "succeeded", "reason": "x"}, ALICE, 400, 'outcome "failed"'),
        ({"key": key, "outcome": "retry", "by": "mallory"}, ALICE, 400, "'by' is not accepted"),
        ({"key": "eff-nope", "outcome": "retry"}, ALICE, 409, "not waiting for"),
        ({"key": key, "outcome": "retry"}, BOB, 404, "no thread"),
        ({"key": key, "outcome": "retry"}, VIC, 403, "viewer"),
        ({"key": key, "outcome": "retry"}, {"X-Api-Key": "nope"}, 401, "bearer token"),
    ]
    for body, who, code, problem in cases:
        got = client.post(f"/api/threads/{THREAD}/resolve", json=body, headers=who)
        assert got.status_code == code, (body, got.text)
        assert problem in got.json()["error"], (body, got.text)
        assert _unchanged(paused) == before


def test_pending_and_status_show_the_call_and_how_to_settle_it(paused: Runner, db_url: str) -> None:
    from conftest import run_cli

    ((flight, tool_call_id),) = booking_task.bookings()
    (effect,) = paused.effects(THREAD)
    shown = run_cli("pending", THREAD, db=db_url)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "effect outcome unknown" in text
    assert f"effect: tool:book_flight (key {effect.key})" in text
    assert f"tool call id: {tool_call_id}" in text
    assert f'"flight": "{flight}"' in text
    assert f"longtask effects resolve {THREAD} {effect.key} --succeeded --result JSON" in text
    assert "--failed [--reason WHY], or --retry" in text
    assert '[{"type": "accept"}] call it again' in text
    status = run_cli("status", THREAD, db=db_url)
    assert status.returncode == 0, status.stderr
    assert f"longtask effects resolve {THREAD} {effect.key} --succeeded" in status.stdout
    assert tool_call_id in status.stdout and flight in status.stdout


def test_the_cli_takes_agent_inbox_shape_and_a_reason(
    paused: Runner, db_url: str, llm: FakeOpenAI
) -> None:
    from conftest import run_cli

    (effect,) = paused.effects(THREAD)
    before = _unchanged(paused)
    bad = run_cli("resume", THREAD, "--resume", '[{"type": "edit", "args": {}}]', db=db_url)
    assert bad.returncode == 1 and "cannot be edited" in bad.stderr, bad.stderr
    assert '[{"type": "accept"}]' in bad.stderr
    mixed = run_cli("effects", "resolve", THREAD, effect.key, "--retry", "--reason", "x", db=db_url)
    assert mixed.returncode != 0 and "--reason goes with --failed" in mixed.stderr
    assert _unchanged(paused) == before
    done = run_cli(
        "effects", "resolve", THREAD, effect.key, "--failed", "--reason", "no seat", db=db_url
    )
    assert done.returncode == 1, done.stdout + done.stderr  # the step fails: it failed
    st = paused.status(THREAD, usage=False)
    assert st.status == "failed" and st.error is not None
    assert "no seat" in st.error["message"]
    (resolved,) = paused.events(THREAD, kinds=["manual.resolve"])
    assert resolved.data["reason"] == "no seat"


def test_the_cli_resume_settles_it_with_agent_inbox_shape(
    paused: Runner, db_url: str, llm: FakeOpenAI
) -> None:
    from conftest import run_cli

    answer = '[{"type": "response", "args": "booked LX8 as #1"}]'
    done = run_cli("resume", THREAD, "--resume", answer, db=db_url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert paused.status(THREAD, usage=False).status == "completed"
    assert len(booking_task.bookings()) == 1
    assert _tool_reply(llm) == ["booked LX8 as #1"]
    (resolved,) = paused.events(THREAD, kinds=["manual.resolve"])
    assert resolved.data["outcome"] == "succeeded" and resolved.data["by"]
