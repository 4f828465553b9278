"""Decisions and pause requests: what a person answers and what they are asked."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from longtask.model._canonical import canonical


def utcnow() -> datetime:
    return datetime.now(UTC)


def plan_hash(plan: Any) -> str:
    """Content hash of a plan (its canonical encoding, the same in every process): what a
    decision is bound to. A JSON plan hashes as its sorted, compact JSON text, as it did
    before sets and models had a canonical form (so pending approvals keep their hash)."""
    text = json.dumps(canonical(plan, "the plan"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Decision(BaseModel):
    """A person's answer to an approval request, bound to the plan hash it approves."""

    model_config = ConfigDict(extra="forbid")

    approved: bool
    by: str = Field(min_length=1)
    plan_hash: str = Field(min_length=1)
    comment: str | None = None
    #: when the decision was made (with a time zone): it is used only while younger than
    #: the approval's valid_for
    at: AwareDatetime = Field(default_factory=utcnow)
    #: a tool approval only (an ``edit``): the arguments the person corrected the call to;
    #: the tool runs with these, never the model's (``approved`` is true)
    edited_args: dict[str, Any] | None = None
    #: the plan hash of the corrected call (``{"tool": name, "args": edited_args}``): what
    #: the edit approves, checked again before the tool runs
    edited_hash: str | None = None
    #: a tool approval only (a ``respond``): the person's answer, given to the model as the
    #: tool's result; the tool does not run (``approved`` is false)
    response: str | None = None

    @model_validator(mode="after")
    def _one_outcome(self) -> Decision:
        if self.edited_args is not None and (not self.approved or not self.edited_hash):
            raise ValueError("an edit approves the corrected call: approved, with edited_hash")
        if self.response is not None and (self.approved or self.edited_args is not None):
            raise ValueError("a response stands in for the tool: not approved, not an edit")
        return self

    @model_serializer(mode="wrap")
    def _without_unused(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # An approval step's decision is stored and shown as it always was: the fields of a
        # tool call's edit or response appear only when they hold something.
        out: dict[str, Any] = handler(self)
        for key in ("edited_args", "edited_hash", "response"):
            if out.get(key) is None:
                out.pop(key, None)
        return out

    @property
    def outcome(self) -> str:
        """approve, edit, reject or respond."""
        if self.edited_args is not None:
            return "edit"
        if self.response is not None:
            return "respond"
        return "approve" if self.approved else "reject"


class ApprovalRequest(BaseModel):
    """What an approval step asks: recorded in state before the step pauses."""

    kind: Literal["approval"] = "approval"
    step: str
    plan: Any = None
    plan_hash: str
    approvers: list[str] | None = None
    requested_at: datetime
    deadline: datetime | None = None
    valid_for: float | None = None


class WaitRequest(BaseModel):
    """What a wait step waits for: an outside event named like the step."""

    kind: Literal["wait"] = "wait"
    step: str
    schema_: Any = Field(default=None, alias="schema")
    started_at: datetime
    deadline: datetime | None = None

    model_config = ConfigDict(populate_by_name=True)
