"""Tasks for the worker acceptance tests (``test_workers.py``).

- ``fenced``: ``s1`` -> ``s2`` -> ``s3``. The first run of ``s2`` (marker ``$LT_HOLD``)
  writes its pid to ``$LT_HOLD.pid`` and then waits until the file ``$LT_RELEASE`` exists
  (a test SIGSTOPs that process meanwhile); any later run of ``s2`` returns at once.
  Every run of ``s2`` appends its pid to ``$LT_RUNS``.
- ``gated``: ``prepare`` -> approval ``go`` -> ``finish``: it waits for a person.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from longtask import LongTask, Stage, StepContext, approval, function_step


def _s1(ctx: StepContext) -> str:
    return "one"


def _s2(ctx: StepContext) -> dict[str, int]:
    with open(os.environ["LT_RUNS"], "a") as f:
        f.write(f"{os.getpid()}\n")
    hold = Path(os.environ["LT_HOLD"])
    if not hold.exists():
        hold.write_text("held")
        Path(str(hold) + ".pid").write_text(str(os.getpid()))
        deadline = time.monotonic() + 60
        while not Path(os.environ["LT_RELEASE"]).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return {"pid": os.getpid()}


def _s3(ctx: StepContext) -> dict[str, int]:
    return {"after": ctx.result("s2")["pid"]}


fenced = LongTask(
    "fenced",
    stages=[
        Stage("a", [function_step(_s1, name="s1")]),
        Stage("b", [function_step(_s2, name="s2")]),
        Stage("c", [function_step(_s3, name="s3")]),
    ],
)

gated = LongTask(
    "gated",
    stages=[
        Stage("a", [function_step(lambda ctx: {"n": ctx.inputs["n"]}, name="prepare")]),
        Stage("b", [approval("go", plan=lambda ctx: ctx.result("prepare"))]),
        Stage("c", [function_step(lambda ctx: ctx.result("prepare")["n"] * 2, name="finish")]),
    ],
)
