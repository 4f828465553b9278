"""A 20-step LongTask that can kill its own process at a chosen step (acceptance tests).

Stages have 1, 3, 4, 1, 2, 1, 3, 1, 3, 1 steps (``step01`` ... ``step20``); the steps of a
stage run in parallel. Step ``n`` returns ``{"step": name, "value": v}`` where ``v`` is ``n``
plus the values of its direct dependencies (read with ``ctx.result``); ``step01`` adds the
task input ``seed`` and the last step also adds ``step01``'s value, read across stages.
:func:`expected_values` computes the same numbers without running anything.

Environment:

- ``LT_COUNTER_DB``: every call is recorded there first (see ``counter.py``).
- ``LT_CRASH_AT``: the step at which the process dies with ``os._exit(1)``, once: the
  crash creates ``LT_CRASH_MARKER`` and a step that finds it does not crash again.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import counter

from longtask import LongTask, Stage, StepContext, function_step

STAGE_SIZES = (1, 3, 4, 1, 2, 1, 3, 1, 3, 1)


def _layout() -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    n = 0
    for index, size in enumerate(STAGE_SIZES, start=1):
        names = []
        for _ in range(size):
            n += 1
            names.append(f"step{n:02d}")
        out.append((f"stage{index:02d}", names))
    return out


LAYOUT = _layout()
STEP_NAMES = [name for _, names in LAYOUT for name in names]
FIRST, LAST = STEP_NAMES[0], STEP_NAMES[-1]


def siblings(step: str) -> list[str]:
    """The other steps of ``step``'s stage (they run in the same super-step)."""
    for _, names in LAYOUT:
        if step in names:
            return [s for s in names if s != step]
    raise KeyError(step)


def _number(step: str) -> int:
    return int(step.removeprefix("step"))


def expected_values(seed: int) -> dict[str, int]:
    values: dict[str, int] = {}
    previous: list[str] = []
    for _, names in LAYOUT:
        for name in names:
            v = _number(name) + sum(values[d] for d in previous)
            if name == FIRST:
                v += seed
            if name == LAST:
                v += values[FIRST]
            values[name] = v
        previous = names
    return values


def _wait_for_siblings(ctx: StepContext, timeout: float = 20.0) -> None:
    """Block until the results of every sibling of this step are durable (stored as pending
    writes of the current checkpoint), or ``timeout`` seconds have passed."""
    others = siblings(ctx.step)
    if not others:
        return
    from longtask import Runner

    deadline = time.monotonic() + timeout
    with Runner(os.environ["LONGTASK_DB"]) as runner:
        while time.monotonic() < deadline:
            done = {s.name for s in runner.status(ctx.thread_id).steps if s.state == "completed"}
            if done.issuperset(others):
                return
            time.sleep(0.05)


def _maybe_crash(ctx: StepContext) -> None:
    if os.environ.get("LT_CRASH_AT") != ctx.step:
        return
    marker = Path(os.environ["LT_CRASH_MARKER"])
    if marker.exists():
        return
    # In a parallel stage a sibling that is still running when the process dies may
    # legitimately run again on resume (its result was never stored). Waiting until the
    # siblings' results are durable makes the outcome exact: every step except this one
    # must then run exactly once in total.
    _wait_for_siblings(ctx)
    marker.write_text(str(os.getpid()))
    os._exit(1)


def _step(ctx: StepContext) -> dict[str, Any]:
    counter.record(ctx.step)
    _maybe_crash(ctx)
    value = _number(ctx.step)
    for dep in ctx.info.depends_on:
        result = ctx.result(dep)
        assert result["step"] == dep, result
        value += result["value"]
    if ctx.step == FIRST:
        value += int(ctx.inputs.get("seed", 0))
    if ctx.step == LAST:
        value += ctx.result(FIRST)["value"]
    return {"step": ctx.step, "value": value}


task = LongTask(
    name="crash_twenty",
    version="1",
    stages=[
        Stage(stage, [function_step(_step, name=name) for name in names]) for stage, names in LAYOUT
    ],
)
