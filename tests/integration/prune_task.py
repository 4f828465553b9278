"""LongTasks for the retention tests (``test_prune.py``): a thread of ``task`` owns rows in
every table a finished thread can have rows in (events, effect ledger, budget, artifacts,
step results large enough to be stored as blobs).

Inputs: ``shared`` makes the large result the same for every thread (one blob, shared);
``fail`` fails the last step; ``block``: the ``gate`` step creates the file
``$LT_PRUNE_MARKER`` and waits (up to two minutes) until ``$LT_PRUNE_GATE`` exists, so a test
prunes while this thread is running in another process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel

from longtask import InvalidInput, LongTask, Stage, StepContext, approval, function_step


class Inputs(BaseModel):
    shared: bool = False
    fail: bool = False
    block: bool = False


@function_step
def big(ctx: StepContext) -> dict[str, str]:
    text = "shared " * 400 if ctx.inputs.shared else f"{ctx.thread_id} " * 200
    return {"text": text}


@function_step
def charge(ctx: StepContext) -> dict[str, object]:
    receipt = ctx.effect("note", lambda n: {"noted": n}, len(ctx.result("big")["text"]))
    ctx.charge(tokens=10, cost=0.01)
    return {"receipt": receipt}


@function_step
def report(ctx: StepContext) -> dict[str, object]:
    own = ctx.artifact("report.txt", f"report of {ctx.thread_id}\n" * 50)
    common = ctx.artifact("common.txt", "the same for every thread\n" * 50)
    return {"own": own["digest"], "common": common["digest"]}


@function_step(after=["report"])
def gate(ctx: StepContext) -> str:
    if ctx.inputs.block:
        Path(os.environ["LT_PRUNE_MARKER"]).write_text("blocking")
        deadline = time.monotonic() + 120
        while not Path(os.environ["LT_PRUNE_GATE"]).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    if ctx.inputs.fail:
        raise InvalidInput("told to fail")
    return "x" * 2000  # the same in every thread: one blob all of them refer to


task = LongTask(
    name="prune_me",
    version="1",
    inputs=Inputs,
    stages=[Stage("make", [big]), Stage("write", [charge, report, gate])],
)

paused = LongTask(
    name="prune_paused",
    version="1",
    inputs=Inputs,
    stages=[Stage("make", [big]), Stage("ask", [approval("ok")])],
)
