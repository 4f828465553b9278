"""Answers to an effect cut off mid-call (a pause of kind ``effect``): what the pause shows a
person, and every shape a person may settle it in.

The pause's interrupt value is longtask's request (``key``, ``name``, ``args``,
``tool_call_id``, ``result_schema``, ``answer``) with Agent Inbox's ``HumanInterrupt``
beside it (``action_request``: the call's name and arguments, its id and key; ``config``:
accept, respond and ignore offered, edit not; ``description``), so Agent Inbox shows the
call and a person can settle it there. The answers taken, one outcome each:

- longtask's own: ``{"succeeded": RESULT}`` (it happened; RESULT is what it returned),
  ``{"failed": "WHY"}`` (it did not, and the step fails) or ``{"retry": true}`` (call it
  again), optionally with ``"key"`` (the effect's, to be sure which) and ``"by"``;
- Agent Inbox's ``HumanResponse`` list of one: ``response`` (its text, JSON or plain, is
  the result: it happened), ``accept`` (call it again), ``ignore`` (it failed; a text in
  ``args`` is the reason). An ``edit`` is refused: a call that may have happened cannot be
  changed after the fact.

Anything else is refused (:class:`~longtask.errors.BadAnswer`) naming these shapes. The
same conversion serves every door (the CLI, the page, the Server API, MCP, A2A) before the
graph sees the answer, and the graph's own reading of an answer (``_effects._settle``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from longtask.errors import BadAnswer, InvalidInput
from longtask.store._values import to_json_bytes

Outcome = Literal["succeeded", "failed", "retry"]
OUTCOMES: tuple[Outcome, ...] = ("succeeded", "failed", "retry")
_INBOX = ("accept", "edit", "response", "ignore")
#: the keys of longtask's own answer besides its one outcome
_EXTRA = {"key", "by"}

#: what an effect's pause takes, as one line a person can copy from
EFFECT_ANSWER = (
    '{"succeeded": RESULT} if the call happened (RESULT: what it returned), {"failed": "WHY"} '
    'if it did not and the step should fail, or {"retry": true} to call it again; optionally '
    'with "key" (the effect\'s key) and "by" (who settled it); or Agent Inbox\'s '
    '[{"type": "response", "args": RESULT_TEXT}] (it happened), [{"type": "accept"}] (call '
    'it again) or [{"type": "ignore"}] (it failed)'
)
#: what an answer from Agent Inbox's ``ignore`` says of the call, when it gives no reason
IGNORED = "ignored in Agent Inbox"


@dataclass(frozen=True)
class Settled:
    """One answer to an effect's pause, whatever shape it came in."""

    outcome: Outcome
    #: what the call returned (``succeeded``)
    result: Any = None
    #: why it failed (``failed``), if the answer says
    reason: str | None = None
    #: who the answer says settled it, if it names anybody
    by: str | None = None

    def native(self, key: str) -> dict[str, Any]:
        """The answer in longtask's own shape (which converts to itself)."""
        out: dict[str, Any] = {"key": key}
        if self.outcome == "succeeded":
            out["succeeded"] = self.result
        elif self.outcome == "failed":
            out["failed"] = self.reason if self.reason else True
        else:
            out["retry"] = True
        if self.by is not None:
            out["by"] = self.by
        return out


def _refuse(where: str, problem: str) -> BadAnswer:
    return BadAnswer(f"{where}: {problem}; an effect cut off mid-call takes {EFFECT_ANSWER}")


def _shown(answer: Any, limit: int = 80) -> str:
    text = json.dumps(answer, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _from_inbox(where: str, given: Mapping[str, Any]) -> Settled:
    kind, args = given.get("type"), given.get("args")
    if kind == "accept":
        return Settled("retry")  # its args (the request, sent back as is) say nothing more
    if kind == "ignore":
        reason = args.strip() if isinstance(args, str) and args.strip() else IGNORED
        return Settled("failed", reason=reason)
    if kind == "edit":
        raise _refuse(
            where,
            "a call that may have happened cannot be edited; say what became of it (a "
            "response with its result, accept to call it again, ignore if it failed)",
        )
    if isinstance(args, str) and args.strip():
        try:
            return Settled("succeeded", result=json.loads(args))
        except ValueError:
            # plain text: the result as written (a tool's answer is text)
            return Settled("succeeded", result=args)
    if args is None or isinstance(args, str):
        raise _refuse(where, "Agent Inbox's response needs the call's result in args")
    return Settled("succeeded", result=args)  # JSON given as JSON (not Agent Inbox's own)


def _from_own(where: str, key: str, answer: Mapping[str, Any]) -> Settled:
    given = [o for o in OUTCOMES if o in answer]
    unknown = sorted(str(k) for k in set(answer) - set(OUTCOMES) - _EXTRA)
    if unknown or len(given) != 1:
        what = f"unknown keys {unknown}" if unknown else f"{len(given)} outcomes"
        raise _refuse(where, f"the answer {_shown(answer)} has {what}, not one outcome")
    named = answer.get("key", key)
    if named != key:
        raise _refuse(where, f"the answer names effect {named!r}, the pause is for {key!r}")
    by = answer.get("by")
    if by is not None and not (isinstance(by, str) and by.strip()):
        raise _refuse(where, '"by" names who settled it: a non-empty string')
    outcome = given[0]
    value = answer[outcome]
    if outcome == "retry":
        if value is not True:
            raise _refuse(where, '"retry" is true')
        return Settled("retry", by=by)
    if outcome == "failed":
        if value is True:
            return Settled("failed", by=by)
        if not isinstance(value, str):
            raise _refuse(where, '"failed" is why, as text (or true)')
        return Settled("failed", reason=value.strip() or None, by=by)
    return Settled("succeeded", result=value, by=by)


def effect_answer(where: str, key: str, answer: Any) -> Settled:
    """What ``answer`` says of effect ``key``'s cut-off call (BadAnswer, naming the shapes
    taken, if it says nothing this pause can take)."""
    if isinstance(answer, Mapping):
        if "resolved" in answer:
            # the runtime's own resume once it settled the ledger: never a person's answer
            raise _refuse(where, '"resolved" is longtask\'s own; say what became of the call')
        settled = _from_own(where, key, answer)
    elif (
        isinstance(answer, list)
        and answer
        and all(isinstance(a, Mapping) and a.get("type") in _INBOX for a in answer)
    ):
        if len(answer) != 1:
            raise _refuse(where, f"it settles one call, the answer holds {len(answer)} responses")
        settled = _from_inbox(where, answer[0])
    else:
        raise _refuse(where, f"the answer {_shown(answer)} does not say what became of the call")
    if settled.outcome == "succeeded":
        try:
            to_json_bytes(settled.result, "the call's result")
        except InvalidInput as exc:
            raise _refuse(where, str(exc)) from None
    return settled


def inbox_view(request: Mapping[str, Any]) -> dict[str, Any]:
    """Agent Inbox's ``HumanInterrupt`` for an effect's pause (its longtask ``request``): the
    call's name as the action, its arguments, tool call id and key as the action's args."""
    name = str(request.get("name"))
    shown = request.get("args")
    args: dict[str, Any] = dict(shown) if isinstance(shown, Mapping) else {"args": shown}
    if request.get("tool_call_id") is not None:
        args["tool_call_id"] = request["tool_call_id"]
    args["key"] = request.get("key")
    call = f"tool call {request['tool_call_id']} " if request.get("tool_call_id") else ""
    description = (
        f"**{name}** ({call}in step {request.get('step')!r}, effect key {request.get('key')}) "
        "was cut off mid-call: the process stopped before it returned, so nobody knows "
        "whether it happened. Say what became of it:\n\n"
        "- **Respond** with its result (JSON, or the text it returned) if it happened;\n"
        "- **Accept** to call it again, if it did not happen;\n"
        f"- **Ignore** if it failed: the step fails.\n\nArguments: `{_shown(shown, 500)}`"
    )
    return {
        "action_request": {"action": name, "args": args},
        "config": {
            "allow_accept": True,
            "allow_edit": False,
            "allow_respond": True,
            "allow_ignore": True,
        },
        "description": description,
    }
