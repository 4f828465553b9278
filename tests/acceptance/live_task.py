"""A task for the live events test: ``crunch`` takes ``$LT_LIVE_SECONDS`` seconds (10 by
default), reporting progress each second; ``report`` is quick, and so is ``prep``, unless
``$LT_LIVE_GO`` names a file: then it waits for that file (the test's followers are up)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from longtask import LongTask, Stage, StepContext, function_step


def prep(ctx: StepContext) -> str:
    go = os.environ.get("LT_LIVE_GO")
    deadline = time.monotonic() + 60
    while go and not Path(go).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "ready"


def crunch(ctx: StepContext) -> int:
    seconds = int(os.environ.get("LT_LIVE_SECONDS", "10"))
    for i in range(seconds):
        time.sleep(1)
        ctx.progress(i + 1, seconds, "crunching")
    return seconds


def report(ctx: StepContext) -> str:
    return f"crunched for {ctx.result('crunch')} s"


task = LongTask(
    "live",
    stages=[
        Stage(
            "work",
            [
                function_step(prep),
                function_step(crunch, after="prep"),
                function_step(report, after="crunch"),
            ],
        )
    ],
)
