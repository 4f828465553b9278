"""Tasks for the crash-numbering test (``test_crash_numbering.py``): one per step kind that
does work, each a single step ``work`` that holds (inside the step's own code: the
function, a map item, an agent's tool, a graph's node) until the file ``$LT_GO`` exists,
so the test can kill the process mid-step as often as it likes."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from longtask import (
    LongTask,
    Prompt,
    Stage,
    StepContext,
    agent_step,
    function_step,
    graph_step,
    map_step,
    subtask_step,
)


def hold() -> None:
    """Wait for ``$LT_GO`` (at most a minute: a test that forgot it still ends)."""
    go = Path(os.environ["LT_GO"])
    deadline = time.monotonic() + 60
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def work(ctx: StepContext) -> str:
    hold()
    return "done"


def items(ctx: StepContext) -> list[int]:
    return [0, 1]


def item(ctx: Any, value: int) -> int:
    if value == 1:
        hold()
    return value * 10


def wait_for_go(reason: str) -> str:
    """Wait until the test lets the work go on."""
    hold()
    return "go"


FUNCTION = LongTask("num_function", stages=[Stage("s", [function_step(work, name="work")])])
MAP = LongTask("num_map", stages=[Stage("s", [map_step(item, over=items, name="work")])])
AGENT = LongTask(
    "num_agent",
    stages=[
        Stage(
            "s",
            [
                agent_step(
                    "work",
                    prompt=Prompt(name="work", version="1", template="Work."),
                    tools=[wait_for_go],
                    read_only_tools=["wait_for_go"],
                )
            ],
        )
    ],
)


class _State(TypedDict, total=False):
    done: str


def _node(state: _State) -> dict[str, str]:
    hold()
    return {"done": "done"}


_graph: StateGraph[Any, Any, Any, Any] = StateGraph(_State)
_graph.add_node("hold", _node)
_graph.add_edge(START, "hold")
_graph.add_edge("hold", END)
GRAPH = LongTask(
    "num_graph", stages=[Stage("s", [graph_step("work", _graph, input=lambda ctx: {})])]
)

#: the work of a sub-task step happens in its child thread (here: FUNCTION's), so that is
#: where its attempts are numbered
SUBTASK = LongTask("num_subtask", stages=[Stage("s", [subtask_step("work", FUNCTION)])])


def charge(amount: int) -> str:
    """An outside effect: each call is a line in ``$LT_CHARGES``."""
    with Path(os.environ["LT_CHARGES"]).open("a") as f:
        f.write(f"{amount}\n")
    return "charged"


def pay(ctx: StepContext) -> str:
    hold()
    return str(ctx.effect("charge", charge, 5))


#: a function step that runs an effect, then ends (for the kill after its attempt count is
#: forgotten and before its checkpoint: ``$LT_EXIT_AFTER_CLEAR``)
EFFECT = LongTask("num_effect", stages=[Stage("s", [function_step(pay, name="work")])])

if os.environ.get("LT_EXIT_AFTER_CLEAR"):
    # The chosen crash point: an attempt after a recovered one succeeded and the step's
    # attempt count was deleted, and the step's checkpoint (step.completed) is not stored.
    from longtask.store._limits import LimitTables

    _clear = LimitTables.attempts_clear

    def _clear_then_die(self: LimitTables, thread_id: str, step: str, item: int) -> None:
        _clear(self, thread_id, step, item)
        os._exit(9)

    LimitTables.attempts_clear = _clear_then_die  # type: ignore[method-assign]
