"""LangChain's human-in-the-loop shape (and Agent Inbox's) on longtask's approvals.

An approval's interrupt value carries, next to longtask's plan, plan hash and approvers,
the ``action_requests`` and ``review_configs`` of LangChain's ``HumanInTheLoopMiddleware``
(each request's arguments as ``args`` and, for Agent Inbox, ``arguments``), so a tool that
speaks that shape can show the request and answer it. Two answer shapes are taken:
LangChain's ``{"decisions": [{"type": "approve" | "edit" | "reject" | "respond", ...}]}``
and Agent Inbox's ``[{"type": "accept" | "edit" | "response" | "ignore", "args": ...}]``.
Either is turned into a longtask :class:`Decision` and checked like any other (plan hash,
approvers, deadline):

- ``approve`` / ``accept`` approves the plan of this request; ``reject`` rejects it, its
  ``message`` becoming the decision's comment;
- an approval step's plan comes from the task and a person cannot rewrite it: its
  ``edit`` counts only with the plan unchanged (as an approval; otherwise the plan-hash
  check refuses it), Agent Inbox's ``response`` rejects it with the text as the comment,
  and ``respond`` is refused;
- a tool approval also takes ``edit`` (the tool runs with the corrected arguments, which
  the decision holds and is bound to by their hash) and ``respond`` / Agent Inbox's
  ``response`` (the tool does not run; the text is the tool's result for the model);
- Agent Inbox's ``ignore`` is not offered (a pause is answered, not dropped).

Who decided: where the Runner hands the answer on (``longtask resume --resume``), the
decision is recorded with the Runner's identity for the caller. A decision in this shape
given through LangGraph's own API carries nobody's identity, so it is recorded as
:data:`RAW_APPROVER`; an approval limited to named approvers refuses it (answer those with
``longtask approve ... --by NAME``, or over HTTP where the token names the approver).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from longtask.errors import InvalidInput, describe_validation
from longtask.model import ApprovalRequest, Decision
from longtask.model._decision import plan_hash

#: the approver recorded for a HITL decision given through LangGraph's own API
RAW_APPROVER = "langgraph"

#: the decisions an approval step offers: a plan is approved or rejected, not rewritten
ALLOWED = ["approve", "reject"]
#: the decisions a tool approval offers, as LangChain's HumanInTheLoopMiddleware does
TOOL_ALLOWED = ["approve", "edit", "reject", "respond"]
#: Agent Inbox's answer types (its ``HumanResponse``)
INBOX_TYPES = ("accept", "edit", "response", "ignore")


def with_hitl(
    value: dict[str, Any],
    action: str,
    args: dict[str, Any],
    description: str,
    allowed: list[str] = ALLOWED,
) -> dict[str, Any]:
    """``value`` (an approval's interrupt value) with LangChain's HITL request added."""
    request = {"name": action, "args": args, "arguments": args, "description": description}
    return {
        **value,
        "action_requests": [request],
        "review_configs": [{"action_name": action, "allowed_decisions": list(allowed)}],
    }


def is_tool_approval(request: dict[str, Any]) -> bool:
    """Whether a pending approval's request is a tool call's (an agent step's)."""
    return request.get("kind") == "approval" and "tool_call_id" in request


def _inbox(answer: Any) -> bool:
    return (
        isinstance(answer, list)
        and bool(answer)
        and all(isinstance(a, dict) and a.get("type") in INBOX_TYPES for a in answer)
    )


def is_hitl(answer: Any) -> bool:
    return (isinstance(answer, dict) and "decisions" in answer) or _inbox(answer)


def _from_inbox(request: ApprovalRequest, answer: list[Any], tool: bool) -> dict[str, Any]:
    """LangChain's decision for Agent Inbox's one ``HumanResponse``."""
    if len(answer) != 1:
        raise InvalidInput(
            f"the answer to approval {request.step!r} must hold one response for its one "
            'action: [{"type": "accept", "args": null}]'
        )
    kind, args = answer[0]["type"], answer[0].get("args")
    if kind == "accept":
        return {"type": "approve"}
    if kind == "response":
        if not isinstance(args, str) or not args.strip():
            raise InvalidInput(f"the response to approval {request.step!r} needs its text in args")
        return {"type": "respond" if tool else "reject", "message": args}
    if kind == "edit":
        if not isinstance(args, dict) or not isinstance(args.get("args"), dict):
            raise InvalidInput(
                f"the edit for approval {request.step!r} needs args "
                '{"action": NAME, "args": {...}} (the corrected call)'
            )
        return {"type": "edit", "edited_action": {"name": args.get("action"), **args}}
    raise InvalidInput(
        f"approval {request.step!r} does not offer ignore: a pause is answered, not dropped; "
        "accept it, or answer with a response (which rejects it, with your text)"
    )


def decision_from_hitl(
    request: ApprovalRequest,
    answer: Any,
    now: datetime,
    *,
    by: str | None,
    plan_of: Any = None,
    tool: bool = False,
) -> Any:
    """The Decision a HITL answer stands for (``answer`` unchanged if it is not one).

    ``by``: the identity the calling layer vouches for, else :data:`RAW_APPROVER`.
    ``plan_of(args)``: the plan an ``edit`` proposes, from its edited arguments (default:
    ``args["plan"]``). ``tool``: the request is a tool call's (edit and respond offered)."""
    if not is_hitl(answer):
        return answer
    if _inbox(answer):
        answer = {"decisions": [_from_inbox(request, answer, tool)]}
    decisions = answer.get("decisions")
    if not isinstance(decisions, list) or len(decisions) != 1 or not isinstance(decisions[0], dict):
        raise InvalidInput(
            f"the answer to approval {request.step!r} must hold one decision for its one "
            'action: {"decisions": [{"type": "approve"}]} (or "reject", with a "message")'
        )
    decision = decisions[0]
    kind = decision.get("type")
    hash_ = request.plan_hash
    message = decision.get("message")
    comment = message if isinstance(message, str) and message else None
    edited: dict[str, Any] | None = None
    edited_hash: str | None = None
    response: str | None = None
    if kind == "edit":
        edited_action = decision.get("edited_action")
        args = edited_action.get("args") if isinstance(edited_action, dict) else None
        if not isinstance(args, dict):
            raise InvalidInput(
                f"the edit for approval {request.step!r} needs edited_action.args (an object)"
            )
        proposed = plan_hash(plan_of(args) if plan_of is not None else args.get("plan"))
        if tool and proposed != request.plan_hash:
            name = edited_action.get("name") if isinstance(edited_action, dict) else None
            tool_name = (request.plan or {}).get("tool")
            if name not in (None, tool_name):
                raise InvalidInput(
                    f"the edit for approval {request.step!r} calls {name!r}; an edit corrects "
                    f"the arguments of {tool_name!r}, it does not call another tool"
                )
            edited, edited_hash = args, proposed
        elif proposed != request.plan_hash:
            raise InvalidInput(
                f"the plan of approval {request.step!r} cannot be edited (it comes from the "
                "task): approve it as it is, or reject it with a message"
            )
    elif kind == "respond":
        if not tool:
            raise InvalidInput(
                f"approval {request.step!r} is an approval step's: respond answers a tool call "
                "in its place; approve or reject this plan (with a message)"
            )
        if comment is None:
            raise InvalidInput(f"the response to approval {request.step!r} needs a message")
        response, comment = comment, None
    elif kind not in ("approve", "reject"):
        offered = "approve, edit, reject or respond" if tool else "approve or reject"
        raise InvalidInput(
            f"the decision for approval {request.step!r} has type {kind!r}; use {offered}"
            + ("" if tool else " (or edit with the plan unchanged)")
        )
    try:
        return Decision(
            approved=kind in ("approve", "edit"),
            by=by or RAW_APPROVER,
            plan_hash=hash_,
            comment=comment,
            at=now,
            edited_args=edited,
            edited_hash=edited_hash,
            response=response,
        )
    except ValidationError as exc:
        raise InvalidInput(f"the decision is not valid: {describe_validation(exc)}") from None


def payload_from_inbox(step: str, value: Any) -> Any:
    """A wait's payload from Agent Inbox's response to it (``value`` unchanged if it is not
    one): ``edit`` carries the payload as its action's args, ``response`` as JSON text."""
    if not (
        isinstance(value, list)
        and len(value) == 1
        and isinstance(value[0], dict)
        and value[0].get("type") in INBOX_TYPES
        and set(value[0]) <= {"type", "args"}
    ):
        return value
    kind, args = value[0]["type"], value[0].get("args")
    if kind == "edit" and isinstance(args, dict) and isinstance(args.get("args"), dict):
        return args["args"]
    if kind == "response" and isinstance(args, str):
        try:
            return json.loads(args)
        except json.JSONDecodeError:
            raise InvalidInput(
                f"wait {step!r} takes its payload as JSON: the response is not JSON "
                f"({args[:80]!r}); send it as an edit of the example payload instead"
            ) from None
    raise InvalidInput(
        f"wait {step!r} is answered with its payload: an edit of the example payload "
        '([{"type": "edit", "args": {"action": STEP, "args": PAYLOAD}}]) or a response '
        "holding the payload as JSON text"
    )
