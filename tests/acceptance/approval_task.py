"""A release LongTask for the approval acceptance tests: build -> wait_for("ci") -> verify ->
approval of the release plan -> publish.

Every function step records its call in the outside counter (``$LT_COUNTER_DB``, see
``counter.py``) before doing anything else.
"""

from __future__ import annotations

from typing import Literal

import counter
from pydantic import BaseModel

from longtask import LongTask, Stage, StepContext, approval, function_step, wait_for

APPROVAL_TIMEOUT = 7 * 24 * 3600


class Inputs(BaseModel):
    version: str


class CiResult(BaseModel):
    status: Literal["passed", "failed"]
    url: str | None = None


@function_step
def build(ctx: StepContext) -> dict[str, str]:
    counter.record("build")
    return {"artifact": f"dist/app-{ctx.inputs.version}.tar.gz"}


@function_step
def verify(ctx: StepContext) -> str:
    counter.record("verify")
    ci = ctx.result("ci", CiResult)
    if ci.status != "passed":
        raise RuntimeError(f"CI did not pass: {ci.url}")
    return ci.url or "passed"


def release_plan(ctx: StepContext) -> dict[str, str]:
    return {"artifact": ctx.result("build")["artifact"], "ci": ctx.result("verify")}


@function_step
def publish(ctx: StepContext) -> str:
    counter.record("publish")
    decision = ctx.result("approve_release")
    return f"published {ctx.result('build')['artifact']} (approved by {decision['by']})"


task = LongTask(
    name="approval_release",
    version="1",
    inputs=Inputs,
    stages=[
        Stage("build", [build]),
        Stage("ci", [wait_for("ci", schema=CiResult, timeout=24 * 3600)]),
        Stage("verify", [verify]),
        Stage(
            "approve",
            [
                approval(
                    "approve_release",
                    plan=release_plan,
                    approvers=["alice", "bob"],
                    valid_for=3600,
                    timeout=APPROVAL_TIMEOUT,
                )
            ],
        ),
        Stage("publish", [publish]),
    ],
)
