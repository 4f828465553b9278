"""A small release LongTask for the CLI's first-hour tests: every kind of pause a new user
meets, each asking for JSON of a known shape.

build (a diff stat: a multi-line string) -> wait_for("ci", schema=CiResult) -> approval
"release" of a plan holding the diff stat -> pay (``ctx.effect("charge", ...)``, whose
result is a :class:`Receipt`) -> report (a multi-line string).

``LT_FH_CRASH_MARKER``: when set, ``charge`` kills its process once (``os._exit(1)``), right
in the call, creating the marker file first: the effect's outcome is then unknown and the
thread waits for a person to settle it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel
from typing_extensions import TypedDict

from longtask import LongTask, Stage, StepContext, approval, function_step, wait_for

CRASH_MARKER = "LT_FH_CRASH_MARKER"
DIFF_STAT = " src/auth.py | 40 +++++-----\n tests/test_auth.py | 12 ++--\n 2 files changed"


class Inputs(BaseModel):
    topic: str


class CiResult(BaseModel):
    status: Literal["passed", "failed"]
    url: str | None = None


class Receipt(TypedDict):
    charged: int
    reference: str


def charge(amount: int, note: str) -> Receipt:
    marker = os.environ.get(CRASH_MARKER)
    if marker and not Path(marker).exists():
        Path(marker).write_text(str(os.getpid()))
        os._exit(1)
    return {"charged": amount, "reference": f"r-{note}"}


@function_step
def build(ctx: StepContext) -> dict[str, str]:
    return {"diff_stat": DIFF_STAT}


def release_plan(ctx: StepContext) -> dict[str, str]:
    return {"summary": f"release {ctx.inputs.topic}", "diff_stat": ctx.result("build")["diff_stat"]}


@function_step
def pay(ctx: StepContext) -> Receipt:
    return ctx.effect("charge", charge, 5, note=ctx.inputs.topic)


@function_step
def report(ctx: StepContext) -> str:
    paid = ctx.result("pay")
    return f"# Release {ctx.inputs.topic}\n\npaid {paid['charged']} ({paid['reference']})"


task = LongTask(
    name="first_hour",
    version="1",
    inputs=Inputs,
    stages=[
        Stage("build", [build]),
        Stage("ci", [wait_for("ci", schema=CiResult)]),
        Stage("approve", [approval("release", plan=release_plan, approvers=["alice"])]),
        Stage("pay", [pay]),
        Stage("report", [report]),
    ],
)
