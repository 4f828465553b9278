"""Compile a LongTask into a LangGraph StateGraph.

One node per step, named after the step (a map step's node runs its items itself,
whatever their number). Each step writes its result to a channel of its
own (``out.<step>``), so a checkpoint stores a result once instead of rewriting a growing
dict. The stage barrier and ``after=`` become edges; a step with several dependencies gets a
join edge, which LangGraph runs once every source has finished. Steps whose dependencies
finish together run in the same super-step, in parallel.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from typing_extensions import TypedDict

from longtask.graphs._node import NodeFn
from longtask.model import (
    AgentStep,
    FunctionStep,
    GraphStep,
    LongTask,
    MapStep,
    PauseStep,
    StepInfo,
    SubtaskStep,
    takes_context,
)
from longtask.steps import (
    CONTEXT_CHANNEL,
    INPUTS_CHANNEL,
    StepEnv,
    agent_node,
    ask_node_name,
    fix_agent_node,
    fix_channel,
    function_node,
    graph_node,
    map_node,
    pause_nodes,
    request_channel,
    request_node_name,
    result_channel,
    subtask_node,
)


def _pass(state: Any, config: RunnableConfig) -> dict[str, Any]:
    return {}


def entry_node(task: LongTask, step: str) -> str:
    """The node a step starts at (what its dependencies' edges lead to)."""
    kind = task.steps[step]
    if isinstance(kind, PauseStep):
        return request_node_name(step)
    if isinstance(kind, FunctionStep) and kind.on_failure is not None:
        return f"{step}.run"
    return step


def state_schema(task: LongTask) -> type[Any]:
    fields: dict[str, Any] = {INPUTS_CHANNEL: dict[str, Any]}
    if takes_context(task.steps.values()):
        fields[CONTEXT_CHANNEL] = dict[str, Any]
    for name, step in task.steps.items():
        fields[result_channel(name)] = dict[str, Any]
        if isinstance(step, PauseStep):
            fields[request_channel(name)] = dict[str, Any]
        if isinstance(step, FunctionStep) and step.on_failure is not None:
            fields[fix_channel(name)] = dict[str, Any]
    schema: type[Any] = TypedDict(f"{task.name}State", fields, total=False)  # type: ignore[misc]
    return schema


#: what LangGraph hands every node: the task's inputs. A node reads the rest of the state
#: when it asks for it (graphs._node.LazyState): with the whole state as every node's input,
#: LangGraph read every channel for each task it prepared and compiled each node with the
#: list of all of them, so a step's cost and the compile grew with the task's length.
NodeInput = TypedDict("NodeInput", {INPUTS_CHANNEL: dict[str, Any]}, total=False)  # type: ignore[misc]


def build_graph(task: LongTask, env: StepEnv) -> StateGraph[Any, Any, Any, Any]:
    """The (uncompiled) StateGraph of ``task``; nodes share ``env`` (store, codec)."""
    schema = state_schema(task)
    env.channels = frozenset(schema.__annotations__)
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(schema)
    layout = task.layout
    has_dependents: set[str] = set()

    def add(name: str, fn: NodeFn, meta: dict[str, Any], **extra: Any) -> None:
        graph.add_node(name, fn, metadata=meta, input_schema=NodeInput, **extra)

    for _stage, step in task.iter_steps():
        info = layout[step.name]
        meta = {"longtask_stage": info.stage, "longtask_kind": info.kind}
        entry = step.name
        if isinstance(step, FunctionStep) and step.on_failure is not None:
            # The step, its fixing agent and the step's own node (which dependents wait
            # for): run -> fix -> run ... -> step.
            entry = f"{step.name}.run"
            fixer = step.on_failure.agent
            fix_info = StepInfo(
                name=fixer.name,
                stage=info.stage,
                stage_index=info.stage_index,
                kind="agent",
                depends_on=info.depends_on,
                ancestors=info.ancestors,
            )
            add(
                entry,
                NodeFn(function_node(step, info, env), env, info),
                meta,
                destinations=(step.name, f"{step.name}.fix"),
            )
            add(
                f"{step.name}.fix",
                NodeFn(fix_agent_node(fixer, fix_info, env, task.model, step.name), env, fix_info),
                {**meta, "longtask_kind": "agent"},
                destinations=(entry,),
            )
            add(step.name, NodeFn(_pass, env), meta)
        elif isinstance(step, FunctionStep):
            add(step.name, NodeFn(function_node(step, info, env), env, info), meta)
        elif isinstance(step, AgentStep):
            # The agent graph is built when the node runs and invoked with the node's config:
            # LangGraph checkpoints it as this node's subgraph (see longtask.steps._agent).
            add(step.name, NodeFn(agent_node(step, info, env, task.model), env, info), meta)
        elif isinstance(step, GraphStep):
            # The user's graph is invoked from the node with the node's config: LangGraph
            # checkpoints it as this node's subgraph (see longtask.steps._graph).
            add(step.name, NodeFn(graph_node(step, info, env), env, info), meta)
        elif isinstance(step, MapStep):
            # One node whatever the number of items; see longtask.steps._map.
            add(step.name, NodeFn(map_node(step, info, env), env, info), meta)
        elif isinstance(step, SubtaskStep):
            # One node whatever the number of children; it waits for them at an
            # interrupt (see longtask.steps._subtask).
            add(step.name, NodeFn(subtask_node(step, info, env), env, info), meta)
        elif isinstance(step, PauseStep):
            # Record the request, pause on it, then the step itself (which dependents wait
            # for, so they run only after a real answer); see longtask.steps._pause.
            request, ask, done = pause_nodes(step, info, env)
            entry = request_node_name(step.name)
            add(entry, NodeFn(request, env, info), meta)
            add(
                ask_node_name(step.name),
                NodeFn(ask, env, info, "longtask.pause"),
                meta,
                destinations=(entry, step.name),
            )
            add(step.name, NodeFn(done, env, info), meta)
            graph.add_edge(entry, ask_node_name(step.name))
        else:  # pragma: no cover - new kinds register here
            raise TypeError(f"step kind {step.kind!r} cannot be compiled yet")
        deps = list(info.depends_on)
        has_dependents.update(deps)
        if not deps:
            graph.add_edge(START, entry)
        elif len(deps) == 1:
            graph.add_edge(deps[0], entry)
        else:
            graph.add_edge(deps, entry)
    for name in task.steps:
        if name not in has_dependents:
            graph.add_edge(name, END)
    return graph


def compile_graph(
    task: LongTask,
    env: StepEnv,
    saver: BaseCheckpointSaver[Any],
    store: BaseStore | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """``build_graph`` compiled with ``saver`` and LangGraph's ``store`` (which the graphs
    of graph steps and agents' tools run under it reach, as a subgraph does)."""
    with _gc_paused():
        return build_graph(task, env).compile(checkpointer=saver, store=store, name=task.name)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Compiling allocates a few hundred thousand objects that all live on (the graph), so
    the collector's passes over them find nothing, and each one walks the whole heap: with
    it running, compiling 1,600 steps took twice as long. Cycles made meanwhile, here or in
    other threads, are collected once it runs again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
