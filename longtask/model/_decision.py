"""Decisions and pause requests: what a person answers and what they are asked."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

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
