"""A LongTask whose second step leaves the way ``$LT_HOW`` says (acceptance tests of what a
step that exits, is interrupted or raises a bare BaseException does to the run):

- ``exit0`` / ``exit1`` / ``exitmsg``: ``raise SystemExit(0)`` / ``(1)`` / ``("bye")``;
- ``kbd``: ``raise KeyboardInterrupt`` (as Ctrl-C would);
- ``base``: ``raise Odd("odd")``, a BaseException that is not an Exception;
- ``nap``: write ``$LT_NAP_MARKER``, then sleep a minute (for a real SIGINT);
- unset: return 2.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from longtask import LongTask, Stage, StepContext, function_step


class Odd(BaseException):
    pass


@function_step
def first(ctx: StepContext) -> int:
    return 1


@function_step
def leave(ctx: StepContext) -> int:
    how = os.environ.get("LT_HOW", "")
    if how == "exit0":
        raise SystemExit(0)
    if how == "exit1":
        raise SystemExit(1)
    if how == "exitmsg":
        raise SystemExit("bye")
    if how == "kbd":
        raise KeyboardInterrupt
    if how == "base":
        raise Odd("odd")
    if how == "nap":
        Path(os.environ["LT_NAP_MARKER"]).write_text(str(os.getpid()))
        time.sleep(60)
    return 2


task = LongTask("exits", stages=[Stage("a", [first]), Stage("b", [leave])])


@function_step
def beside(ctx: StepContext) -> int:
    return 3


#: ``nap`` beside another step of its stage: LangGraph runs both on its executor's threads,
#: and the main thread only waits for them
parallel = LongTask("exits_parallel", stages=[Stage("a", [first]), Stage("b", [leave, beside])])
