"""A thread of a plain LangGraph graph served as is (``model.GraphApp``: the one-step
LongTask around a graph step) as LangGraph's server shows a thread of that graph: its state,
history and stream are the graph's own, read from the graph step's own checkpoints (the
graph runs as a subgraph on the thread's saver, in the step node's namespace), not the
wrapper's step results.

The graph's checkpoints keep their ids: a checkpoint id of the history names one of them
(``checkpoint_ns`` shown as ``""``, the graph being the thread's graph here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from longtask.serve.lgapi._chat import KEY, messages_json
from longtask.serve.lgapi._json import plain

if TYPE_CHECKING:
    from longtask._runner import Runner
    from longtask.model import GraphApp
    from longtask.store import ThreadRecord

try:  # pragma: no cover - the import that works depends on LangGraph's version
    from langgraph._internal._constants import CONFIG_KEY_CHECKPOINTER
except ImportError:  # pragma: no cover - LangGraph moved it; its value has not changed
    CONFIG_KEY_CHECKPOINTER = "__pregel_checkpointer"

__all__ = ["inner_ns", "plain_head", "plain_history", "plain_state", "plain_values"]


def inner_ns(runner: Runner, thread_id: str, step: str) -> str | None:
    """The namespace of the graph step's latest run (see ``Runner.graph_ns``)."""
    return runner.graph_ns(thread_id, step)


def plain_head(runner: Runner, task: GraphApp, thread_id: str) -> str | None:
    """The id of the graph's latest checkpoint (its state's), if it has one."""
    ns = inner_ns(runner, thread_id, task.graph_step.name)
    if ns is None:
        return None
    found = runner.db.saver.get_tuple(
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    )
    return found.config["configurable"].get("checkpoint_id") if found is not None else None


def _graph(runner: Runner, task: GraphApp, thread_id: str) -> Any:
    from longtask.steps import resolve_graph

    return resolve_graph(task.graph_step, {"configurable": {"thread_id": thread_id}})


def _config(runner: Runner, thread_id: str, ns: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        # the graph reads its own checkpoints from the thread's saver, as a subgraph does
        CONFIG_KEY_CHECKPOINTER: runner.db.saver,
    }
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def plain_values(values: Any) -> Any:
    """The graph's state values as the API's JSON (messages as the API's message dicts)."""
    if not isinstance(values, dict):
        return plain(values)
    return {
        k: messages_json(v) if k == KEY and isinstance(v, list) else plain(v)
        for k, v in values.items()
    }


def _own_ns(conf: Mapping[str, Any], base: str) -> str:
    """A namespace as the graph names it: without the graph step's own, where the graph
    keeps its state (``base``)."""
    ns = str(conf.get("checkpoint_ns") or "")
    return ns[len(base) + 1 :] if ns.startswith(base + "|") else "" if ns == base else ns


def _where(thread_id: str, config: Any, base: str) -> dict[str, Any] | None:
    conf = (config or {}).get("configurable") or {}
    if not conf.get("checkpoint_id"):
        return None
    out = {
        "thread_id": thread_id,
        "checkpoint_ns": _own_ns(conf, base),
        "checkpoint_id": conf["checkpoint_id"],
    }
    found = conf.get("checkpoint_map")
    if out["checkpoint_ns"] and isinstance(found, Mapping):
        # A subgraph's checkpoint names its graphs' checkpoints, the graph's own as the
        # root (the task's and the step's are longtask's, not the graph's)
        out["checkpoint_map"] = {
            _own_ns({"checkpoint_ns": ns}, base): cid
            for ns, cid in found.items()
            if ns == base or str(ns).startswith(base + "|")
        }
    return out


def _state_json(thread_id: str, snap: Any, *, finished: bool, base: str) -> dict[str, Any]:
    from langgraph.types import StateSnapshot

    tasks = []
    interrupts: list[dict[str, Any]] = []
    for t in snap.tasks:
        intrs = [] if finished else [{"value": plain(i.value), "id": i.id} for i in t.interrupts]
        interrupts.extend(intrs)
        # A subgraph's task: its state (get_state with subgraphs), else where it is, as
        # LangGraph's server shows it.
        sub = t.state
        state = (
            _state_json(thread_id, sub, finished=False, base=base)
            if isinstance(sub, StateSnapshot)
            else None
        )
        where = None
        if isinstance(sub, Mapping) and isinstance(sub.get("configurable"), Mapping):
            where = {"thread_id": thread_id, "checkpoint_ns": _own_ns(sub["configurable"], base)}
        tasks.append(
            {
                "id": t.id,
                "name": t.name,
                "error": str(t.error) if t.error is not None else None,
                "interrupts": intrs,
                "checkpoint": where,
                "state": state,
                "result": plain_values(t.result) if getattr(t, "result", None) else None,
                "path": plain(list(getattr(t, "path", ()) or ())),
            }
        )
    here = _where(thread_id, snap.config, base)
    parent = _where(thread_id, snap.parent_config, base)
    metadata = {
        k: v for k, v in dict(snap.metadata or {}).items() if k not in ("parents", "checkpoint_ns")
    }
    return {
        "values": plain_values(snap.values),
        "next": [] if finished else list(snap.next),
        "checkpoint": here,
        "metadata": plain(metadata),
        "created_at": snap.created_at,
        "parent_checkpoint": parent,
        "tasks": tasks,
        "interrupts": interrupts,
        "checkpoint_id": (here or {}).get("checkpoint_id"),
        "parent_checkpoint_id": (parent or {}).get("checkpoint_id"),
    }


def plain_state(
    runner: Runner,
    task: GraphApp,
    rec: ThreadRecord,
    checkpoint_id: str | None = None,
    *,
    subgraphs: bool = False,
) -> dict[str, Any] | None:
    """The graph's state (at ``checkpoint_id``, one of its own), or None before the graph
    has a checkpoint; with ``subgraphs``, a pending task's subgraph's state in it."""
    ns = inner_ns(runner, rec.thread_id, task.graph_step.name)
    if ns is None:
        return None
    snap = _graph(runner, task, rec.thread_id).get_state(
        _config(runner, rec.thread_id, ns, checkpoint_id), subgraphs=subgraphs
    )
    if not snap.config or snap.created_at is None:
        return None
    finished = rec.status in ("failed", "completed", "cancelled") and checkpoint_id is None
    return _state_json(rec.thread_id, snap, finished=finished, base=ns)


def plain_history(
    runner: Runner,
    task: GraphApp,
    rec: ThreadRecord,
    *,
    limit: int,
    before: str | None,
    metadata: dict[str, Any] | None = None,
    at: str | None = None,
) -> list[dict[str, Any]]:
    """The graph's own checkpoints, newest first, as LangGraph's server lists a thread's."""
    ns = inner_ns(runner, rec.thread_id, task.graph_step.name)
    if ns is None:
        return []
    graph = _graph(runner, task, rec.thread_id)
    finished = rec.status in ("failed", "completed", "cancelled")
    out: list[dict[str, Any]] = []
    for snap in graph.get_state_history(
        _config(runner, rec.thread_id, ns, at),
        filter=metadata,
        limit=limit,
        before=_config(runner, rec.thread_id, ns, before) if before else None,
    ):
        head = not out and before is None and at is None and not metadata
        state = _state_json(rec.thread_id, snap, finished=finished and head, base=ns)
        out.append(state)
    return out
