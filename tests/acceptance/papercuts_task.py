"""A two-step task for issue 45's papercut tests: ``first`` returns at once; ``second``
waits (up to a minute) for the file named by ``LT_PC_GO`` to exist, so a test can act on
the process between the two steps' output lines (close the pipe it prints to)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from longtask import LongTask, Stage, StepContext, approval, function_step


@function_step
def first(ctx: StepContext) -> int:
    return 1


@function_step
def second(ctx: StepContext) -> int:
    go = os.environ.get("LT_PC_GO")
    deadline = time.monotonic() + 60
    while go and not Path(go).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return 2


task = LongTask(
    name="papercuts",
    version="1",
    stages=[Stage("one", [first]), Stage("two", [second])],
)


def _plan(ctx: StepContext) -> dict[str, int]:
    return {"first": ctx.result("first")}


#: first -> an approval of a plan made from first's result -> second
gated = LongTask(
    name="papercuts_gated",
    version="1",
    stages=[
        Stage("one", [first]),
        Stage("gate", [approval("ok", plan=_plan)]),
        Stage("two", [second]),
    ],
)


@function_step
def hold(ctx: StepContext) -> int:
    return second.fn(ctx)  # type: ignore[no-any-return]


#: hold (waits for LT_PC_GO) -> first and second side by side
held = LongTask(
    name="papercuts_held",
    version="1",
    stages=[Stage("one", [hold]), Stage("two", [first, second])],
)
