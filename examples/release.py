"""Release: build, wait for CI, a human approval of the release plan, publish.

    longtask run examples/release.py:task --input '{"version": "1.4.0"}'   # pauses (exit 3)
    longtask signal <thread> ci --payload '{"status": "passed", "url": "https://ci/1"}'
    longtask approve <thread> approve_release --by alice                    # completes

The CI system calls `longtask signal` (or `Runner.signal`) when its run finishes; no process
waits in between. The approval is bound to the release plan's hash: if the plan changes
before it is approved, the old decision no longer counts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from longtask import LongTask, Stage, StepContext, approval, function_step, wait_for


class Inputs(BaseModel):
    version: str
    channel: Literal["stable", "beta"] = "stable"


class CiResult(BaseModel):
    status: Literal["passed", "failed"]
    url: str | None = None


@function_step
def build(ctx: StepContext) -> dict[str, str]:
    version = ctx.inputs.version
    return {"artifact": f"dist/app-{version}.tar.gz", "version": version}


@function_step
def check_ci(ctx: StepContext) -> str:
    ci = ctx.result("ci", CiResult)
    if ci.status != "passed":
        raise RuntimeError(f"CI did not pass: {ci.url}")
    return ci.url or "passed"


def release_plan(ctx: StepContext) -> dict[str, str]:
    """What the approver signs off: computed from earlier results, hashed."""
    return {
        "artifact": ctx.result("build")["artifact"],
        "channel": ctx.inputs.channel,
        "ci": ctx.result("check_ci"),
    }


@function_step
def publish(ctx: StepContext) -> str:
    decision = ctx.result("approve_release")
    return f"published {ctx.result('build')['artifact']} (approved by {decision['by']})"


task = LongTask(
    name="release",
    version="1",
    inputs=Inputs,
    stages=[
        Stage("build", [build]),
        Stage("ci", [wait_for("ci", schema=CiResult, timeout=24 * 3600)]),
        Stage("verify", [check_ci]),
        Stage(
            "approve",
            [
                approval(
                    "approve_release",
                    plan=release_plan,
                    approvers=["alice", "bob"],
                    valid_for=3600,
                    timeout=7 * 24 * 3600,
                )
            ],
        ),
        Stage("publish", [publish]),
    ],
)
