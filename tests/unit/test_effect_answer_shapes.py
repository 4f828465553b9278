"""Every shape a person may settle an effect cut off mid-call in, converted to one outcome
(steps._effectanswer): longtask's own, Agent Inbox's ``HumanResponse`` list; anything else
refused, naming the shapes taken. And the pause's Agent Inbox view of the call."""

from __future__ import annotations

from typing import Any

import pytest

from longtask.errors import BadAnswer
from longtask.steps._effectanswer import IGNORED, Settled, effect_answer, inbox_view

KEY = "eff-0123"
WHERE = "the answer to effect 'tool:book_flight'"

GOOD: list[tuple[str, Any, Settled]] = [
    ("own succeeded", {"succeeded": {"n": 1}}, Settled("succeeded", result={"n": 1})),
    ("own succeeded null", {"succeeded": None}, Settled("succeeded", result=None)),
    ("own failed why", {"failed": "card declined"}, Settled("failed", reason="card declined")),
    ("own failed true", {"failed": True}, Settled("failed")),
    ("own retry", {"retry": True}, Settled("retry")),
    (
        "own with key and by",
        {"retry": True, "key": KEY, "by": "ops"},
        Settled("retry", by="ops"),
    ),
    (
        "inbox response text",
        [{"type": "response", "args": "booked LX8 as #1"}],
        Settled("succeeded", result="booked LX8 as #1"),
    ),
    (
        "inbox response JSON",
        [{"type": "response", "args": '{"content": "booked", "status": "success"}'}],
        Settled("succeeded", result={"content": "booked", "status": "success"}),
    ),
    (
        "inbox response JSON null",
        [{"type": "response", "args": "null"}],
        Settled("succeeded", result=None),
    ),
    (
        "inbox response as JSON",
        [{"type": "response", "args": {"content": "x"}}],
        Settled("succeeded", result={"content": "x"}),
    ),
    # Agent Inbox sends the action request back with accept: it says nothing more
    (
        "inbox accept",
        [{"type": "accept", "args": {"action": "tool:book_flight", "args": {}}}],
        Settled("retry"),
    ),
    ("inbox accept bare", [{"type": "accept"}], Settled("retry")),
    ("inbox ignore", [{"type": "ignore", "args": None}], Settled("failed", reason=IGNORED)),
    (
        "inbox ignore why",
        [{"type": "ignore", "args": "the airline refused"}],
        Settled("failed", reason="the airline refused"),
    ),
]


@pytest.mark.parametrize(("what", "answer", "settled"), GOOD, ids=[g[0] for g in GOOD])
def test_each_shape_says_one_outcome(what: str, answer: Any, settled: Settled) -> None:
    got = effect_answer(WHERE, KEY, answer)
    assert got == settled
    # converted to longtask's own shape, it converts to itself: it may be checked again
    assert effect_answer(WHERE, KEY, got.native(KEY)) == got


BAD: list[tuple[str, Any, str]] = [
    ("nothing", None, "does not say what became of the call"),
    ("a word", "retry", "does not say what became of the call"),
    ("an unknown key", {"ok": True}, "unknown keys ['ok']"),
    ("two outcomes", {"succeeded": 1, "retry": True}, "2 outcomes"),
    ("no outcome", {"by": "ops"}, "0 outcomes"),
    ("another effect", {"retry": True, "key": "eff-other"}, "names effect 'eff-other'"),
    ("retry false", {"retry": False}, '"retry" is true'),
    ("failed a number", {"failed": 3}, '"failed" is why'),
    ("by empty", {"retry": True, "by": " "}, '"by" names who'),
    ("longtask's own resume", {"resolved": "succeeded"}, '"resolved" is longtask'),
    (
        "an edit",
        [{"type": "edit", "args": {"action": "tool:book_flight", "args": {}}}],
        "cannot be edited",
    ),
    ("two responses", [{"type": "accept"}, {"type": "ignore"}], "holds 2 responses"),
    ("an empty response", [{"type": "response", "args": " "}], "needs the call's result"),
    ("a response with none", [{"type": "response", "args": None}], "needs the call's result"),
    ("decisions", {"decisions": [{"type": "approve"}]}, "unknown keys ['decisions']"),
    ("a result that is no JSON", {"succeeded": {1, 2}}, "JSON"),
]


@pytest.mark.parametrize(("what", "answer", "problem"), BAD, ids=[b[0] for b in BAD])
def test_an_answer_of_another_shape_is_refused_naming_the_shapes(
    what: str, answer: Any, problem: str
) -> None:
    with pytest.raises(BadAnswer) as refused:
        effect_answer(WHERE, KEY, answer)
    text = str(refused.value)
    assert text.startswith(WHERE) and problem in text, text
    for shape in ('{"succeeded": RESULT}', '{"retry": true}', '[{"type": "accept"}]'):
        assert shape in text, text


def test_the_native_shape_of_each_outcome() -> None:
    assert Settled("succeeded", result="x").native(KEY) == {"key": KEY, "succeeded": "x"}
    assert Settled("failed").native(KEY) == {"key": KEY, "failed": True}
    assert Settled("failed", reason="no", by="ann").native(KEY) == {
        "key": KEY,
        "failed": "no",
        "by": "ann",
    }
    assert Settled("retry").native(KEY) == {"key": KEY, "retry": True}


def test_agent_inbox_sees_the_call_its_arguments_and_id() -> None:
    request = {
        "kind": "effect",
        "step": "agent",
        "key": KEY,
        "name": "tool:book_flight",
        "args": {"tool": "book_flight", "args": {"flight": "LX8"}, "tool_call_id": "call_1"},
        "tool_call_id": "call_1",
    }
    view = inbox_view(request)
    assert view["action_request"] == {
        "action": "tool:book_flight",
        "args": {
            "tool": "book_flight",
            "args": {"flight": "LX8"},
            "tool_call_id": "call_1",
            "key": KEY,
        },
    }
    # accept (call it again), respond (its result), ignore (it failed); never edit
    assert view["config"] == {
        "allow_accept": True,
        "allow_edit": False,
        "allow_respond": True,
        "allow_ignore": True,
    }
    for said in ("tool:book_flight", "call_1", KEY, "Respond", "Accept", "Ignore", "LX8"):
        assert said in view["description"]
    # an effect of a function step: its arguments as a list, no tool call id
    plain = inbox_view({"name": "charge", "key": KEY, "step": "pay", "args": [42]})
    assert plain["action_request"] == {"action": "charge", "args": {"args": [42], "key": KEY}}
    assert "tool call" not in plain["description"]
