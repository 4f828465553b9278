"""A LongTask for the one-writer test: a fast step, a step that fails on its first run, then
four slow steps in a row.

Environment:

- ``LT_COUNTER_DB``: every call is recorded there (see ``counter.py``).
- ``LT_FAILED_MARKER``: ``flaky`` fails (and creates this file) when the file is missing.
- ``LT_GATE``: on its second run ``flaky`` waits (up to a minute) until this file exists, so
  the test decides when the resuming process may go on; the run that holds the thread is
  then certainly still running while a second process tries to advance it.
- ``LT_SLOW``: seconds each slow step sleeps (default 0.3).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import counter

from longtask import LongTask, Stage, StepContext, function_step


@function_step
def fetch(ctx: StepContext) -> int:
    counter.record(ctx.step)
    return 1


@function_step
def flaky(ctx: StepContext) -> int:
    counter.record(ctx.step)
    marker = Path(os.environ["LT_FAILED_MARKER"])
    if not marker.exists():
        marker.write_text("failed once")
        raise RuntimeError("flaky failed on its first run")
    gate = os.environ.get("LT_GATE")
    if gate:
        deadline = time.monotonic() + 60
        while not Path(gate).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return ctx.result("fetch") + 1


def _slow(ctx: StepContext) -> int:
    counter.record(ctx.step)
    time.sleep(float(os.environ.get("LT_SLOW", "0.3")))
    (previous,) = ctx.info.depends_on
    return int(ctx.result(previous)) + 1


SLOW_STEPS = ["slow1", "slow2", "slow3", "slow4"]

task = LongTask(
    name="slow_chain",
    version="1",
    stages=[
        Stage("prepare", [fetch]),
        Stage("risky", [flaky]),
        *(Stage(f"stage_{name}", [function_step(_slow, name=name)]) for name in SLOW_STEPS),
    ],
)
