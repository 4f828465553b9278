"""LangChain's human-in-the-loop shape on longtask's approvals.

An approval's interrupt value carries, next to longtask's plan, plan hash and approvers,
the ``action_requests`` and ``review_configs`` of LangChain's ``HumanInTheLoopMiddleware``,
so a tool that speaks that shape (Agent Inbox) can show the request and answer it with
``{"decisions": [{"type": "approve" | "reject" | "edit", ...}]}``. Such an answer is turned
into a longtask :class:`Decision` and checked like any other (plan hash, approvers,
deadline):

- ``approve`` approves the plan of this request; ``reject`` rejects it, its ``message``
  becoming the decision's comment;
- ``edit`` approves the plan in ``edited_action.args["plan"]`` (the tool call's new
  arguments, for a tool approval): a plan that differs from the pending one is refused by
  the plan-hash check (longtask's plans come from the task, a person cannot rewrite them),
  so only an unchanged one counts, as an approval.

Who decided: where the Runner hands the answer on (``longtask resume --resume``), the
decision is recorded with the Runner's identity for the caller. A decision in this shape
given through LangGraph's own API carries nobody's identity, so it is recorded as
:data:`RAW_APPROVER`; an approval limited to named approvers refuses it (answer those with
``longtask approve ... --by NAME``, or over HTTP where the token names the approver).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ValidationError

from longtask.errors import InvalidInput, describe_validation
from longtask.model import ApprovalRequest, Decision
from longtask.model._decision import plan_hash

#: the approver recorded for a HITL decision given through LangGraph's own API
RAW_APPROVER = "langgraph"

#: the decisions an approval offers: a plan is approved or rejected, not rewritten
ALLOWED = ["approve", "reject"]


def with_hitl(
    value: dict[str, Any], action: str, args: dict[str, Any], description: str
) -> dict[str, Any]:
    """``value`` (an approval's interrupt value) with LangChain's HITL request added."""
    return {
        **value,
        "action_requests": [{"name": action, "args": args, "description": description}],
        "review_configs": [{"action_name": action, "allowed_decisions": list(ALLOWED)}],
    }


def is_hitl(answer: Any) -> bool:
    return isinstance(answer, dict) and "decisions" in answer


def decision_from_hitl(
    request: ApprovalRequest,
    answer: Any,
    now: datetime,
    *,
    by: str | None,
    plan_of: Any = None,
) -> Any:
    """The Decision a HITL answer stands for (``answer`` unchanged if it is not one).

    ``by``: the identity the calling layer vouches for, else :data:`RAW_APPROVER`.
    ``plan_of(args)``: the plan an ``edit`` proposes, from its edited arguments (default:
    ``args["plan"]``)."""
    if not is_hitl(answer):
        return answer
    decisions = answer.get("decisions")
    if not isinstance(decisions, list) or len(decisions) != 1 or not isinstance(decisions[0], dict):
        raise InvalidInput(
            f"the answer to approval {request.step!r} must hold one decision for its one "
            'action: {"decisions": [{"type": "approve"}]} (or "reject", with a "message")'
        )
    decision = decisions[0]
    kind = decision.get("type")
    hash_ = request.plan_hash
    if kind == "edit":
        edited = decision.get("edited_action")
        args = edited.get("args") if isinstance(edited, dict) else None
        if not isinstance(args, dict):
            raise InvalidInput(
                f"the edit for approval {request.step!r} needs edited_action.args (an object)"
            )
        hash_ = plan_hash(plan_of(args) if plan_of is not None else args.get("plan"))
    elif kind not in ("approve", "reject"):
        raise InvalidInput(
            f"the decision for approval {request.step!r} has type {kind!r}; use approve or "
            "reject (or edit with the plan unchanged)"
        )
    message = decision.get("message")
    try:
        return Decision(
            approved=kind != "reject",
            by=by or RAW_APPROVER,
            plan_hash=hash_,
            comment=message if isinstance(message, str) and message else None,
            at=now,
        )
    except ValidationError as exc:
        raise InvalidInput(f"the decision is not valid: {describe_validation(exc)}") from None
