"""Tasks for the LangGraph SDK test, loaded by file reference by ``longtask serve``.

- ``lg_release``: two parallel steps -> an approval (alice) -> a wait for ``ci`` -> finish.
- ``lg_long``: prepare -> an approval -> ``long_step``, whose first run takes
  ``LT_LONG_SECONDS`` (default 30) and later runs a moment. It creates ``LT_LONG_STARTED``
  when it starts and ``LT_LONG_DONE`` when it ends.
- ``lg_sleepy``: three steps in a row of ``LT_SLEEPY`` seconds each (default 1), or each
  held until the file ``$LT_SLEEPY_GATE`` exists, to cancel.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from longtask import LongTask, Stage, StepContext, approval, function_step, wait_for


@function_step
def fetch_a(ctx: StepContext) -> dict[str, int]:
    return {"a": 1}


@function_step
def fetch_b(ctx: StepContext) -> dict[str, int]:
    return {"b": 2}


def ship_plan(ctx: StepContext) -> dict[str, Any]:
    return {"total": ctx.result("fetch_a")["a"] + ctx.result("fetch_b")["b"], "to": "prod"}


class CiResult(BaseModel):
    status: Literal["passed", "failed"]


@function_step
def finish(ctx: StepContext) -> str:
    return f"shipped after ci {ctx.result('ci', CiResult).status} by {ctx.result('ship_ok')['by']}"


RELEASE = LongTask(
    "lg_release",
    stages=[
        Stage("gather", [fetch_a, fetch_b]),
        Stage("approve", [approval("ship_ok", plan=ship_plan, approvers=["alice"])]),
        Stage("ci", [wait_for("ci", schema=CiResult)]),
        Stage("done", [finish]),
    ],
)


@function_step
def prepare(ctx: StepContext) -> str:
    return "ready"


@function_step
def long_step(ctx: StepContext) -> str:
    started = Path(os.environ["LT_LONG_STARTED"])
    first = not started.exists()
    started.write_text("started")
    time.sleep(float(os.environ.get("LT_LONG_SECONDS", "30")) if first else 0.2)
    Path(os.environ["LT_LONG_DONE"]).write_text("done")
    return "long done"


LONG = LongTask(
    "lg_long",
    stages=[
        Stage("prepare", [prepare]),
        Stage("approve", [approval("go", plan=lambda ctx: {"go": True}, approvers=["alice"])]),
        Stage("work", [long_step]),
    ],
)


def _sleepy(ctx: StepContext) -> str:
    gate = os.environ.get("LT_SLEEPY_GATE")
    if gate:
        # Held until the test opens the gate (after its cancel), then until the run has seen
        # the cancel: the next step is then never started, whatever the machine's speed.
        deadline = time.monotonic() + 60
        while not Path(gate).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while not ctx.cancel_requested and time.monotonic() < deadline:
            time.sleep(0.05)
        return ctx.step
    time.sleep(float(os.environ.get("LT_SLEEPY", "1")))
    return ctx.step


SLEEPY = LongTask(
    "lg_sleepy",
    stages=[
        Stage("one", [function_step(_sleepy, name="nap1")]),
        Stage("two", [function_step(_sleepy, name="nap2")]),
        Stage("three", [function_step(_sleepy, name="nap3")]),
    ],
)
