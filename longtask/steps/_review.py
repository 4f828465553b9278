"""Answers to a tool review of LangChain's ``HumanInTheLoopMiddleware`` in a graph's own
``interrupt()``: what it asks, what it takes, and every shape a person may answer it in.

The middleware asks in one of two shapes:

- ``batched`` (its default): ``{"action_requests": [{"name", "args", "description"}],
  "review_configs": [{"action_name", "allowed_decisions"}]}``, one interrupt per model turn,
  answered with ``{"decisions": [...]}``, one decision per action, in order;
- ``per_call``: ``{"type": "tool_approval", "tool_call_id", "name", "args",
  "description"}``, one interrupt per tool call, answered with one decision; the
  interrupt's ``response_schema`` names the decisions allowed.

A decision is ``{"type": "approve"}``, ``{"type": "edit", "edited_action": {"name",
"args"}}``, ``{"type": "reject", "message"?}`` or ``{"type": "respond", "message"}``. The
graph takes nothing else: any other answer raises inside it (a ``TypeError`` or a
``ValidationError``) and would fail the step. So every answer is checked and converted
here, before anything is recorded, from any of:

- LangChain's ``{"decisions": [...]}`` (for a per-call review: its one decision, bare or so
  wrapped);
- Agent Inbox's ``HumanResponse`` list, one per action: ``accept`` approves, ``edit``
  (``args: {"action", "args"}``) edits, ``response`` (text) responds in the tool's place
  (or, where responding is not allowed, rejects with the text as the reason), ``ignore``
  rejects;
- longtask's approval shapes: ``true`` / ``false``, ``"approve"`` / ``"reject"``,
  ``{"approved": bool, "comment"?, "edited_args"?, "response"?}`` (what ``longtask
  approve`` / ``reject`` give): an approval or rejection holds for every action; an edit
  or a response only where there is one.

A decision the action does not allow, the wrong number of them, or an answer of none of
these shapes is refused (:class:`~longtask.errors.BadAnswer`) with the shape it takes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from longtask.errors import BadAnswer

#: LangChain's decision types, in its order
DECISIONS = ("approve", "edit", "reject", "respond")
#: Agent Inbox's answer types (its ``HumanResponse``)
INBOX = ("accept", "edit", "response", "ignore")
_YES = {"approve", "approved", "accept", "yes"}
_NO = {"reject", "rejected", "deny", "no"}
#: the keys of longtask's own decision an answer may carry (a Decision's dump has them all)
_OWN = {"approved", "comment", "edited_args", "response", "plan_hash", "by", "at", "edited_hash"}


@dataclass(frozen=True)
class Action:
    """One tool call under review."""

    name: str
    args: Any
    description: str
    allowed: tuple[str, ...]

    def view(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "args": self.args,
            "description": self.description,
            "allowed_decisions": list(self.allowed),
        }


@dataclass(frozen=True)
class Review:
    """A tool review a graph's interrupt asks for (``per_call``: one call, one decision)."""

    per_call: bool
    actions: tuple[Action, ...]

    def shape(self) -> str:
        """The answer it takes, as one line a person can copy from."""
        first = self.actions[0]
        kinds = ", ".join(_example(a, d) for a in self.actions[:1] for d in a.allowed)
        if self.per_call:
            head = f"one decision for {first.name!r}: {kinds}"
        else:
            names = ", ".join(repr(a.name) for a in self.actions)
            head = (
                f'{{"decisions": [...]}} with one decision per tool call, in order ({names}); '
                f"for {first.name!r}: {kinds}"
            )
        return (
            head + "; or Agent Inbox's "
            '[{"type": "accept" | "edit" | "response" | "ignore", "args": ...}], one per call, '
            "or `longtask approve` / `reject`"
        )


def _example(action: Action, kind: str) -> str:
    if kind == "edit":
        edit = {"name": action.name, "args": action.args}
        return json.dumps({"type": "edit", "edited_action": edit}, ensure_ascii=False)
    if kind == "reject":
        return '{"type": "reject", "message": "why (optional)"}'
    if kind == "respond":
        return '{"type": "respond", "message": "the tool\'s result"}'
    return json.dumps({"type": kind})


def _allowed_in(schema: Any) -> tuple[str, ...]:
    """The decision types a per-call interrupt's ``response_schema`` admits (the
    ``const`` of each branch's ``type``); all of them when it names none."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            kind = (node.get("properties") or {}).get("type")
            if isinstance(kind, Mapping) and kind.get("const") in DECISIONS:
                found.append(kind["const"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return tuple(d for d in DECISIONS if d in found) or DECISIONS


def review_of(value: Any, response_schema: Any = None) -> Review | None:
    """The tool review ``value`` (a graph interrupt's value) asks for, or None."""
    if not isinstance(value, Mapping):
        return None
    if value.get("type") == "tool_approval" and isinstance(value.get("name"), str):
        action = Action(
            value["name"],
            value.get("args"),
            str(value.get("description") or ""),
            _allowed_in(response_schema),
        )
        return Review(True, (action,))
    requests, configs = value.get("action_requests"), value.get("review_configs")
    if not (
        isinstance(requests, list)
        and requests
        and isinstance(configs, list)
        and all(isinstance(r, Mapping) and isinstance(r.get("name"), str) for r in requests)
        and all(isinstance(c, Mapping) for c in configs)
    ):
        return None
    by_name = {c.get("action_name"): c.get("allowed_decisions") for c in configs}
    actions = []
    for i, req in enumerate(requests):
        allowed = configs[i].get("allowed_decisions") if len(configs) == len(requests) else None
        allowed = allowed or by_name.get(req["name"]) or DECISIONS
        kinds = tuple(d for d in DECISIONS if d in allowed)
        described = str(req.get("description") or "")
        actions.append(Action(req["name"], req.get("args"), described, kinds))
    return Review(False, tuple(actions))


def review_of_request(request: Mapping[str, Any]) -> Review | None:
    """The tool review a pending graph interrupt (its longtask request) asks for."""
    return review_of(request.get("value"), request.get("response_schema"))


def _refuse(where: str, review: Review, problem: str) -> BadAnswer:
    return BadAnswer(f"{where}: {problem}; it takes {review.shape()}")


def _from_inbox(where: str, review: Review, action: Action, given: Mapping[str, Any]) -> Any:
    kind, args = given.get("type"), given.get("args")
    if kind == "accept":
        return {"type": "approve"}
    if kind == "ignore":
        return {"type": "reject"}
    if kind == "response":
        if not isinstance(args, str) or not args.strip():
            raise _refuse(where, review, "Agent Inbox's response needs its text in args")
        kind = "respond" if "respond" in action.allowed else "reject"
        return {"type": kind, "message": args}
    if not isinstance(args, Mapping) or not isinstance(args.get("args"), Mapping):
        raise _refuse(
            where, review, 'Agent Inbox\'s edit needs args {"action": NAME, "args": {...}}'
        )
    return {
        "type": "edit",
        "edited_action": {"name": args.get("action") or action.name, "args": args["args"]},
    }


def _from_own(where: str, review: Review, given: Any) -> list[Any] | None:
    """longtask's approval shapes as one decision per action (None: not one of them)."""
    if isinstance(given, bool):
        given = {"approved": given}
    elif isinstance(given, str) and given.lower() in _YES | _NO:
        given = {"approved": given.lower() in _YES}
    if not (
        isinstance(given, Mapping)
        and given
        and set(given) <= _OWN
        and (isinstance(given.get("approved"), bool) or given.get("response") is not None)
    ):
        return None
    if given.get("plan_hash") is not None:
        raise _refuse(where, review, "a tool review has no plan hash to bind a decision to")
    comment, edited = given.get("comment"), given.get("edited_args")
    response = given.get("response")
    if (edited is not None or response is not None) and len(review.actions) != 1:
        raise _refuse(
            where,
            review,
            f"it reviews {len(review.actions)} tool calls: an edit or a response names which, "
            "in a list of decisions",
        )
    if response is not None:
        return [{"type": "respond", "message": response}]
    if given.get("approved"):
        if edited is not None:
            edit = {"name": review.actions[0].name, "args": edited}
            return [{"type": "edit", "edited_action": edit}]
        return [{"type": "approve"} for _ in review.actions]
    rejected: dict[str, Any] = {"type": "reject"}
    if isinstance(comment, str) and comment:
        rejected["message"] = comment
    return [dict(rejected) for _ in review.actions]


def _decisions(where: str, review: Review, answer: Any) -> list[Any]:
    if isinstance(answer, Mapping) and "decisions" in answer:
        if set(answer) != {"decisions"} or not isinstance(answer["decisions"], list):
            raise _refuse(where, review, 'the answer holds "decisions" (a list) and nothing else')
        return list(answer["decisions"])
    if review.per_call and isinstance(answer, Mapping) and answer.get("type") in DECISIONS:
        return [answer]
    if (
        isinstance(answer, list)
        and answer
        and all(isinstance(a, Mapping) and a.get("type") in INBOX for a in answer)
    ):
        if len(answer) != len(review.actions):
            raise _refuse(
                where,
                review,
                f"it reviews {len(review.actions)} tool call(s), the answer holds "
                f"{len(answer)} response(s)",
            )
        return [
            _from_inbox(where, review, action, given)
            for action, given in zip(review.actions, answer, strict=True)
        ]
    own = _from_own(where, review, answer)
    if own is None:
        shown = json.dumps(answer, default=str, ensure_ascii=False)
        shown = shown if len(shown) <= 80 else shown[:79] + "…"
        raise _refuse(where, review, f"the answer {shown} is not a decision")
    return own


def _check(where: str, review: Review, action: Action, decision: Any) -> dict[str, Any]:
    if not isinstance(decision, Mapping) or decision.get("type") not in DECISIONS:
        raise _refuse(
            where, review, f"a decision is an object whose type is one of {', '.join(DECISIONS)}"
        )
    kind = decision["type"]
    if kind not in action.allowed:
        raise _refuse(
            where,
            review,
            f"{action.name!r} does not allow {kind} (allowed: {', '.join(action.allowed)})",
        )
    message = decision.get("message")
    if kind in ("reject", "respond") and message is not None and not isinstance(message, str):
        raise _refuse(where, review, f"the message of a {kind} is text")
    if kind == "respond" and not (isinstance(message, str) and message.strip()):
        raise _refuse(where, review, "a respond needs a message (the tool's result)")
    if kind == "edit":
        edited = decision.get("edited_action")
        if not isinstance(edited, Mapping) or not isinstance(edited.get("args"), Mapping):
            raise _refuse(where, review, "an edit needs edited_action.args (an object)")
        name = edited.get("name") or action.name
        if not isinstance(name, str):
            raise _refuse(where, review, "an edit's edited_action.name is a tool's name")
        return {**decision, "edited_action": {**edited, "name": name}}
    return dict(decision)


def review_answer(where: str, review: Review, answer: Any, response_schema: Any = None) -> Any:
    """``answer`` as the review's interrupt takes it (BadAnswer, naming the shape, if it
    cannot): a converted answer converts to itself, so it may be checked again."""
    decisions = _decisions(where, review, answer)
    if len(decisions) != len(review.actions):
        raise _refuse(
            where,
            review,
            f"it reviews {len(review.actions)} tool call(s), the answer holds "
            f"{len(decisions)} decision(s)",
        )
    pairs = zip(review.actions, decisions, strict=True)
    checked = [_check(where, review, action, d) for action, d in pairs]
    out: Any = checked[0] if review.per_call else {"decisions": checked}
    if isinstance(response_schema, Mapping):
        problem = schema_problem(out, response_schema)
        if problem is not None:
            raise _refuse(where, review, problem)
    return out


def schema_problem(value: Any, schema: Mapping[str, Any]) -> str | None:
    """Why ``value`` does not fit the JSON ``schema`` an interrupt gave for its answer."""
    import jsonschema  # type: ignore[import-untyped]

    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path) or "the answer"
        return f"{where}: {exc.message}"
    except jsonschema.SchemaError:
        return None  # the graph's schema is not one we can check with: the graph checks
    return None
