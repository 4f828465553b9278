"""A graph step's graph that raises on an answer goes back to the same pause (issue 51,
item 4).

An answer longtask's checks let through can still make the graph raise (code that reads a
field the answer lacks, a middleware given a shape nobody converted). LangGraph stores the
answer with the error (the ``RESUME`` write of the task that asked) and hands it to the
same interrupt() on every later run: each resume raised again, and the thread was failed
for good. So when the run of a graph step that answered its graph's interrupts raises,
and the task that asked holds this very answer beside its error, the answer is taken back
(its ``RESUME`` write is stored again without it: the interrupt() asks again) and the step
leaves the node as the same pause, with the same interrupt ids, the error shown on it and
recorded as ``interrupt.refused``. A correct answer afterwards goes on as any answer does.
An error of a run that answered nothing, or of a task other than the one that asked (it
took the answer and returned: the answer is in the graph's state), fails the step as any
error does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME
from langgraph.errors import GraphInterrupt
from langgraph.types import Interrupt

from longtask.model import StepInfo
from longtask.steps._attempts import describe, error_type
from longtask.steps._call import NodeCall
from longtask.steps._function import StepEnv

try:  # pragma: no cover - the import that works depends on LangGraph's version
    from langgraph._internal._constants import CONFIG_KEY_CHECKPOINTER, CONFIG_KEY_RESUME_MAP
except ImportError:  # pragma: no cover - LangGraph moved them; their values have not changed
    CONFIG_KEY_CHECKPOINTER = "__pregel_checkpointer"
    CONFIG_KEY_RESUME_MAP = "__pregel_resume_map"

#: the event that records an answer a graph raised on
REFUSED = "interrupt.refused"
#: LangGraph's writes that say what happened to a task, not what it produced
_CONTROL = frozenset({ERROR, INTERRUPT, RESUME, "__error_source_node__"})

AsPause = Callable[..., GraphInterrupt]


def _asked(writes: Sequence[tuple[str, Any]]) -> tuple[list[Interrupt], Any, bool] | None:
    """What a task's writes say: the interrupts it asked, its answers, and whether it
    failed on its own (not cancelled beside a sibling that failed); None if it finished."""
    interrupts: list[Interrupt] = []
    answers: Any = None
    own = False
    for channel, value in writes:
        if channel == INTERRUPT:
            interrupts = list(value) if isinstance(value, Sequence) else [value]
        elif channel == RESUME:
            answers = value
        elif channel == ERROR:
            # stored as the error, or as its repr: a task cancelled beside a sibling's
            # failure did not fail on its answer
            own = not (
                isinstance(value, asyncio.CancelledError)
                or str(value).startswith("CancelledError(")
            )
        elif channel not in _CONTROL:
            return None  # it wrote output: it finished
    return interrupts, answers, own


def take_back_answers(config: RunnableConfig, thread_id: str, ns: str) -> dict[str, Interrupt]:
    """Take back the answers this run gave to interrupts of the graph in namespace ``ns``
    (or one below it: a subgraph's, a sub-agent's) whose task raised with the answer: each
    asking task's answers are stored again without this run's. The interrupts asked again,
    by id (empty: the error is not one of an answer)."""
    conf = config.get("configurable") or {}
    given = conf.get(CONFIG_KEY_RESUME_MAP)
    saver = conf.get(CONFIG_KEY_CHECKPOINTER)
    find = getattr(saver, "failed_answered_tasks", None)
    if not isinstance(given, Mapping) or not given or saver is None or find is None:
        return {}
    # The task that asked is the deepest one holding the interrupt: a task that ran the
    # subgraph that asked holds the subgraph's interrupts too.
    askers: dict[str, tuple[int, Any, list[Any], Interrupt]] = {}
    for task in find(thread_id, ns):
        read = _asked(task.writes)
        if read is None:
            continue
        interrupts, answers, own = read
        if not own or not isinstance(answers, list) or not answers:
            continue
        depth = str(task.config["configurable"]["checkpoint_ns"]).count("|")
        for intr in interrupts:
            # this run's answer is the last the task holds (LangGraph adds one per run)
            if intr.id not in given or answers[-1] != given[intr.id]:
                continue
            if intr.id not in askers or depth > askers[intr.id][0]:
                askers[intr.id] = (depth, task, answers, intr)
    for _depth, task, answers, _intr in askers.values():
        # stored again without the answer: the task's interrupt() asks again
        saver.put_writes(task.config, [(RESUME, answers[:-1])], task.task_id, task.task_path)
    return {key: intr for key, (_d, _t, _a, intr) in askers.items()}


def refused_pause(
    exc: Exception,
    env: StepEnv,
    call: NodeCall,
    info: StepInfo,
    graph: Any,
    config: RunnableConfig,
    ns: str,
    as_pause: AsPause,
) -> GraphInterrupt | None:
    """The pause a run of the graph that raised ``exc`` on an answer goes back to (the
    answer taken back, the error recorded), or None: not an error on an answer."""
    refused = take_back_answers(config, call.thread_id, ns)
    if not refused:
        return None
    error = describe(exc)
    for interrupt_id in refused:
        env.emit(
            call,
            REFUSED,
            call.key(REFUSED, interrupt_id, time.time_ns()),
            info,
            data={"interrupt_id": interrupt_id, "type": error_type(exc), "error": error[:2000]},
        )
    # every interrupt the graph waits at: the one asked again, and any other still open
    try:
        waiting = list(graph.get_state(config).interrupts)
    except Exception:  # the state unread: the interrupts taken back are the pause
        waiting = []
    asked = {i.id for i in waiting}
    waiting += [i for key, i in refused.items() if key not in asked]
    shown = error if len(error) <= 300 else error[:299] + "…"
    return as_pause(
        GraphInterrupt(tuple(waiting)),
        env,
        call,
        info,
        graph,
        config,
        refused=dict.fromkeys(refused, shown),
    )
