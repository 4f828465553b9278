"""longtask threads as the LangGraph Server API shows them: thread objects, thread states
(values are the steps' results by step name, and ``messages``: the conversation of the agent
step running or paused now) and statuses."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from longtask.errors import TaskRefError
from longtask.graphs import agent_conversation, entry_node

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph
    from langgraph.types import StateSnapshot

    from longtask.model import LongTask
    from longtask.runtime import Runner
    from longtask.serve._lg_assistants import Registry
    from longtask.store import ThreadRecord

#: longtask thread status -> LangGraph thread status
THREAD_STATUS = {
    # recorded but not advancing (a fork, a state update): a run continues it
    "pending": "idle",
    "running": "busy",
    "cancelling": "busy",
    "waiting_user": "interrupted",
    "waiting_external": "interrupted",
    "failed": "error",
    "completed": "idle",
    "cancelled": "idle",
}


def plain(value: Any) -> Any:
    """``value`` as JSON data (datetimes and models as text, like the rest of the API)."""
    return json.loads(json.dumps(value, default=_default))


def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return str(value)


def iso(ts: float | datetime) -> str:
    when = ts if isinstance(ts, datetime) else datetime.fromtimestamp(ts, UTC)
    return when.isoformat()


def decode_values(runner: Runner, channels: Any) -> dict[str, Any]:
    """Step results by step name, from a checkpoint's channel values."""
    if not isinstance(channels, dict):
        return {}
    return {
        k[4:]: plain(runner.codec.decode(v, strict=False))
        for k, v in channels.items()
        if isinstance(k, str) and k.startswith("out.")
    }


def _interrupt(intr: Any) -> dict[str, Any]:
    return {"value": plain(intr.value), "id": intr.id}


def _checkpoint(config: Any) -> dict[str, Any] | None:
    if not config:
        return None
    conf = config.get("configurable", {})
    return {
        "thread_id": conf.get("thread_id"),
        "checkpoint_ns": conf.get("checkpoint_ns", ""),
        "checkpoint_id": conf.get("checkpoint_id"),
        "checkpoint_map": conf.get("checkpoint_map"),
    }


def state_json(runner: Runner, snapshot: StateSnapshot, *, finished: bool) -> dict[str, Any]:
    """A ThreadState; ``finished`` (the thread failed, completed or was cancelled) hides the
    interrupts LangGraph keeps next to a later error: nothing waits for them."""
    tasks = []
    interrupts: list[dict[str, Any]] = []
    for task in snapshot.tasks:
        intrs = [] if finished else [_interrupt(i) for i in task.interrupts]
        interrupts.extend(intrs)
        tasks.append(
            {
                "id": task.id,
                "name": task.name,
                "error": str(task.error) if task.error is not None else None,
                "interrupts": intrs,
                "checkpoint": None,
                "state": None,
                "result": None,
            }
        )
    return {
        "values": decode_values(runner, snapshot.values),
        "next": [] if finished else list(snapshot.next),
        "checkpoint": _checkpoint(snapshot.config),
        "metadata": plain(dict(snapshot.metadata or {})),
        "created_at": snapshot.created_at,
        "parent_checkpoint": _checkpoint(snapshot.parent_config),
        "tasks": tasks,
        "interrupts": interrupts,
    }


def empty_state(thread_id: str) -> dict[str, Any]:
    """The state of a thread no run has started yet."""
    return {
        "values": {},
        "next": [],
        "checkpoint": {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": None,
            "checkpoint_map": None,
        },
        "metadata": {},
        "created_at": None,
        "parent_checkpoint": None,
        "tasks": [],
        "interrupts": [],
    }


def config_of(thread_id: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def thread_state(
    runner: Runner, registry: Registry, rec: ThreadRecord, checkpoint_id: str | None = None
) -> dict[str, Any]:
    return current_state(runner, registry, rec, checkpoint_id)[0]


def graph_of(
    runner: Runner, registry: Registry, rec: ThreadRecord
) -> tuple[LongTask, CompiledStateGraph[Any, Any, Any, Any]]:
    entry = registry.find(rec.task_name)
    task = entry.task if entry is not None else runner._load(rec)
    return task, runner.graph(task)


def current_state(
    runner: Runner, registry: Registry, rec: ThreadRecord, checkpoint_id: str | None = None
) -> tuple[dict[str, Any], str | None]:
    """The ThreadState, and the checkpoint namespace of the agent step whose conversation
    is its ``values["messages"]`` (None when there is none)."""
    task, graph = graph_of(runner, registry, rec)
    snapshot = graph.get_state(config_of(rec.thread_id, checkpoint_id))
    finished = rec.status in ("failed", "completed", "cancelled") and checkpoint_id is None
    if not snapshot.config or (not snapshot.values and not snapshot.next):
        return empty_state(rec.thread_id), None
    state = state_json(runner, snapshot, finished=finished)
    if checkpoint_id is None and rec.status == "pending" and not state["next"]:
        # A state update or a fork left the steps after it untriggered: a run continuing
        # the thread starts those whose dependencies are done (see Runner._stream).
        done = set(state["values"])
        state["next"] = [
            entry_node(task, name)
            for name, info in task.layout.items()
            if name not in done and all(d in done for d in info.depends_on)
        ]
    if checkpoint_id is None and not finished and "messages" not in task.steps:
        # The running or paused agent step's conversation, as Agent Chat UI reads it; a
        # past checkpoint has none (the agent's checkpoints are not kept per parent step).
        found = agent_conversation(graph, snapshot)
        if found is not None:
            state["values"]["messages"] = plain(found[1])
            return state, found[0]
    return state, None


def thread_history(
    runner: Runner,
    registry: Registry,
    rec: ThreadRecord,
    *,
    limit: int,
    before: str | None,
) -> list[dict[str, Any]]:
    entry = registry.find(rec.task_name)
    task = entry.task if entry is not None else runner._load(rec)
    graph = runner.graph(task)
    out = []
    for snap in graph.get_state_history(
        config_of(rec.thread_id),
        limit=limit,
        before=config_of(rec.thread_id, before) if before else None,
    ):
        out.append(state_json(runner, snap, finished=False))
    return out


def thread_json(
    runner: Runner,
    registry: Registry,
    thread_id: str,
    *,
    busy: bool = False,
    with_values: bool = True,
) -> dict[str, Any] | None:
    """The Thread object of ``thread_id`` (a longtask thread, or one created through the API
    with no run yet), or None if there is neither. ``busy``: a run of it is open."""
    store = runner.db.store
    rec = store.get_thread(thread_id)
    made = store.api_thread(thread_id)
    if rec is None and made is None:
        return None
    metadata: dict[str, Any] = dict(made[0]) if made else {}
    if rec is None:
        assert made is not None
        status = "busy" if busy else "idle"
        created = updated = iso(made[1])
        values: dict[str, Any] = {}
        interrupts: dict[str, Any] = {}
    else:
        status = "busy" if busy else THREAD_STATUS.get(rec.status, "idle")
        created, updated = iso(rec.created_at), iso(rec.updated_at)
        metadata.update(graph_id=rec.task_name, longtask_status=rec.status)
        entry = registry.find(rec.task_name)
        if entry is not None:
            metadata["assistant_id"] = entry.assistant_id
        values, interrupts = {}, {}
        state = None
        if with_values:
            try:
                state = thread_state(runner, registry, rec)
            except TaskRefError as exc:
                # A thread of a task this server cannot import: listed, without its state.
                metadata["longtask_error"] = str(exc)
        if state is not None:
            values = state["values"]
            for task in state["tasks"]:
                if task["interrupts"]:
                    interrupts[task["id"]] = task["interrupts"]
    return {
        "thread_id": thread_id,
        "created_at": created,
        "updated_at": updated,
        "metadata": metadata,
        "status": status,
        "values": values,
        "interrupts": interrupts,
    }
