"""A task for the follow test: six steps in a chain, each reporting progress and storing an
artifact; ``s4`` kills its process once (``os._exit``, marker file ``$LT_FOLLOW_MARKER``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from longtask import LongTask, Stage, StepContext, function_step


def _step(name: str) -> object:
    def run(ctx: StepContext) -> str:
        for i in range(3):
            time.sleep(0.05)
            ctx.progress(i + 1, 3, f"{name} part {i + 1}")
        ctx.artifact(f"{name}.txt", f"output of {name}")
        if name == "s4":
            marker = Path(os.environ["LT_FOLLOW_MARKER"])
            if not marker.exists():
                marker.write_text("crashed")
                os._exit(1)
        return name

    return function_step(run, name=name)


task = LongTask(
    "followed",
    stages=[Stage(f"stage{i}", [_step(f"s{i}")]) for i in range(1, 7)],  # type: ignore[list-item]
)
