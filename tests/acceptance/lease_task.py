"""A LongTask for the lock-loss tests (``test_lock_loss.py``): ``first``, then ``hold`` (the
slow step), then ``after1`` and ``after2``.

``hold`` blocks, the first time it runs, until the file ``$LT_GATE`` exists (at most two
minutes): the test decides when the process that holds the thread may write again. Its
later runs pass straight through. Every step records its call (step, pid) in the counter
``$LT_COUNTER_DB`` first, and returns the pid of the process that ran it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import counter

from longtask import LongTask, Stage, StepContext, function_step

STEPS = ["first", "hold", "after1", "after2"]


def _step(ctx: StepContext) -> dict[str, int]:
    counter.record(ctx.step)
    if ctx.step == "hold" and counter.counts(os.environ[counter.ENV_VAR])["hold"] == 1:
        gate = Path(os.environ["LT_GATE"])
        deadline = time.monotonic() + 120
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return {"pid": os.getpid()}


task = LongTask(
    name="lease_loss",
    version="1",
    stages=[Stage(f"stage_{name}", [function_step(_step, name=name)]) for name in STEPS],
)
