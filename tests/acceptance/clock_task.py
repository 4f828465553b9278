"""Tasks for the clock tests (``test_clock_skew.py``): every function step appends its name
to the file ``$LT_RUNS_LOG`` first, so a test counts how often each ran.

- ``chain``: a -> b -> c -> d; ``b`` raises while ``$LT_FAIL`` is set.
- ``gated``: a -> approval ``gate`` -> c -> d.
- ``waiting``: a -> wait_for ``ci`` -> c -> d.
- ``timed``: a -> approval ``gate`` with an hour to answer -> c -> d.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from longtask import LongTask, Stage, StepContext, approval, function_step, wait_for


def _logged(name: str, fail: bool = False) -> Callable[[StepContext], Any]:
    def step(ctx: StepContext) -> str:
        with open(os.environ["LT_RUNS_LOG"], "a") as f:
            f.write(name + "\n")
        if fail and os.environ.get("LT_FAIL"):
            raise RuntimeError(f"{name} fails while LT_FAIL is set")
        return name

    return step


def _task(name: str, second: Any) -> LongTask:
    return LongTask(
        name,
        stages=[
            Stage("first", [function_step(_logged("a"), name="a")]),
            Stage("second", [second]),
            Stage("third", [function_step(_logged("c"), name="c")]),
            Stage("fourth", [function_step(_logged("d"), name="d")]),
        ],
    )


chain = _task("chain", function_step(_logged("b", fail=True), name="b"))
gated = _task("gated", approval("gate", plan=lambda ctx: {"after": ctx.result("a")}))
waiting = _task("waiting", wait_for("ci"))
timed = _task("timed", approval("gate", plan=lambda ctx: {"after": ctx.result("a")}, timeout=3600))
