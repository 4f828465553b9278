"""The task of the multitask test (``test_lg_multitask.py``), loaded by file reference:
``held`` waits until the file ``$LT_MT_GATE`` exists, then an approval by alice, then
``after``."""

from __future__ import annotations

import os
import time
from pathlib import Path

from longtask import LongTask, Stage, StepContext, approval, function_step


@function_step
def held(ctx: StepContext) -> str:
    gate = Path(os.environ["LT_MT_GATE"])
    deadline = time.monotonic() + 60
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "held"


@function_step
def after(ctx: StepContext) -> str:
    return f"after, approved by {ctx.result('ok')['by']}"


HELD = LongTask(
    "mt_held",
    stages=[
        Stage("hold", [held]),
        Stage("approve", [approval("ok", plan=lambda ctx: {"go": True}, approvers=["alice"])]),
        Stage("finish", [after]),
    ],
)
