"""longtask threads as the LangGraph Server API shows them: thread objects, thread states
(values are the steps' results by step name, and ``messages``: the thread's conversation,
see ``chat``) and statuses."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from longtask.errors import TaskRefError
from longtask.graphs import agent_conversation
from longtask.model import GraphApp
from longtask.serve.lgapi._chat import KEY, Conversation, messages_json
from longtask.serve.lgapi._json import iso, plain
from longtask.serve.lgapi._plain import plain_history, plain_state
from longtask.steps import INPUTS_CHANNEL

if TYPE_CHECKING:
    from langgraph.checkpoint.base import CheckpointTuple
    from langgraph.graph.state import CompiledStateGraph
    from langgraph.types import StateSnapshot

    from longtask._runner import Runner
    from longtask.model import LongTask
    from longtask.serve._registry import Registry
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


def decode_values(runner: Runner, channels: Any) -> dict[str, Any]:
    """Step results by step name, from a checkpoint's channel values."""
    if not isinstance(channels, dict):
        return {}
    return {
        k[4:]: plain(runner.codec.decode(v, strict=False))
        for k, v in channels.items()
        if isinstance(k, str) and k.startswith("out.")
    }


def api_values(
    runner: Runner,
    channels: Any,
    chat: Conversation | None,
    live: Iterable[dict[str, Any]] = (),
) -> dict[str, Any]:
    """A checkpoint's values as the API shows them: the steps' results by step name, and
    ``messages``, the conversation (see ``chat``) of a thread started from a chat or of
    a task with agent steps."""
    values = decode_values(runner, channels)
    if chat is None or not chat.shown or not isinstance(channels, dict):
        return values
    raw = channels.get(INPUTS_CHANNEL)
    inputs = runner.codec.decode(raw, strict=False) if raw is not None else None
    inputs = inputs if isinstance(inputs, dict) else None
    if chat.agents or (inputs and KEY in inputs):
        values[KEY] = chat.messages(inputs, values, live)
    return values


def interrupt_json(intr: Any, *, schema: bool = False) -> dict[str, Any]:
    """An Interrupt as the API shows it: in a thread's state ``{value, id}``; in a run's
    stream and outcome (``schema``) with its ``response_schema`` too, as LangGraph's
    server serialises the Interrupt object there."""
    out = {"value": plain(getattr(intr, "value", intr)), "id": getattr(intr, "id", None)}
    if schema:
        out["response_schema"] = plain(getattr(intr, "response_schema", None))
    return out


def step_name(node: str) -> str:
    """The step a node of the task graph belongs to (an approval is two nodes, ``x.request``
    and ``x.ask``; step names hold no dot), as LangGraph's server names a graph's node."""
    return node if node.startswith("__") else node.split(".", 1)[0]


def _steps(nodes: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(step_name(n) for n in nodes))


def _result(runner: Runner, result: Any) -> Any:
    """A finished task's writes (of a past checkpoint) as results by step name."""
    if not isinstance(result, dict):
        return None
    return decode_values(runner, result) or None


def _checkpoint(config: Any) -> dict[str, Any] | None:
    if not config:
        return None
    conf = config.get("configurable", {})
    return {
        "thread_id": conf.get("thread_id"),
        "checkpoint_ns": conf.get("checkpoint_ns", ""),
        "checkpoint_id": conf.get("checkpoint_id"),
        **({"checkpoint_map": conf["checkpoint_map"]} if conf.get("checkpoint_map") else {}),
    }


def state_json(
    runner: Runner,
    snapshot: StateSnapshot,
    *,
    finished: bool,
    chat: Conversation | None = None,
    live: Iterable[dict[str, Any]] = (),
) -> dict[str, Any]:
    """A ThreadState; ``finished`` (the thread failed, completed or was cancelled) hides the
    interrupts LangGraph keeps next to a later error: nothing waits for them. ``chat`` and
    ``live``: see ``api_values``."""
    tasks = []
    interrupts: list[dict[str, Any]] = []
    for task in snapshot.tasks:
        intrs = [] if finished else [interrupt_json(i) for i in task.interrupts]
        interrupts.extend(intrs)
        tasks.append(
            {
                "id": task.id,
                "name": step_name(task.name),
                "error": str(task.error) if task.error is not None else None,
                "interrupts": intrs,
                "checkpoint": None,
                "state": None,
                "result": _result(runner, getattr(task, "result", None)),
                "path": plain(list(getattr(task, "path", ()) or ())),
            }
        )
    return {
        "values": api_values(runner, snapshot.values, chat, live),
        "next": [] if finished else _steps(snapshot.next),
        "checkpoint": _checkpoint(snapshot.config),
        "metadata": plain(dict(snapshot.metadata or {})),
        "created_at": snapshot.created_at,
        "parent_checkpoint": _checkpoint(snapshot.parent_config),
        "tasks": tasks,
        "interrupts": interrupts,
        "checkpoint_id": (snapshot.config or {}).get("configurable", {}).get("checkpoint_id"),
        "parent_checkpoint_id": (snapshot.parent_config or {})
        .get("configurable", {})
        .get("checkpoint_id"),
    }


def empty_state(thread_id: str) -> dict[str, Any]:
    """The state of a thread no run has started yet: no checkpoint, as LangGraph's server
    answers it (``checkpoint`` and ``metadata`` null, not an empty config and object)."""
    return {
        "values": {},
        "next": [],
        "checkpoint": None,
        "metadata": None,
        "created_at": None,
        "parent_checkpoint": None,
        "tasks": [],
        "interrupts": [],
        "checkpoint_id": None,
        "parent_checkpoint_id": None,
    }


def config_of(thread_id: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def thread_state(
    runner: Runner,
    registry: Registry,
    rec: ThreadRecord,
    checkpoint_id: str | None = None,
    *,
    subgraphs: bool = False,
) -> dict[str, Any]:
    state = current_state(runner, registry, rec, checkpoint_id, subgraphs=subgraphs)[0]
    if subgraphs and state["tasks"]:
        # The state of the agent a pending task runs, from the agent's own checkpoints (its
        # graph runs inside the step's node, under the task's namespace).
        graph = graph_of(runner, registry, rec)[1]
        for task in state["tasks"]:
            node = graph.nodes.get(task["name"])  # an agent step's node is its name
            if node is None or (node.metadata or {}).get("longtask_kind") != "agent":
                continue
            ns = f"{task['name']}:{task['id']}"
            found = runner.db.saver.get_tuple(
                {"configurable": {"thread_id": rec.thread_id, "checkpoint_ns": ns}}
            )
            if found is not None:
                task["state"] = subgraph_state(found, task["interrupts"])
    return state


def subgraph_state(found: CheckpointTuple, interrupts: list[Any]) -> dict[str, Any]:
    """An agent's latest checkpoint as a ThreadState (its values: its messages); its
    interrupts are the ones its step's task shows."""
    values = found.checkpoint.get("channel_values", {})
    return {
        "values": {
            k: messages_json(v) if k == KEY and isinstance(v, list) else plain(v)
            for k, v in values.items()
            if not k.startswith("__") and not k.startswith("branch:")
        },
        "next": [],
        "checkpoint": _checkpoint(found.config),
        "metadata": plain(dict(found.metadata or {})),
        "created_at": found.checkpoint.get("ts"),
        "parent_checkpoint": _checkpoint(found.parent_config),
        "tasks": [],
        "interrupts": interrupts,
    }


def graph_of(
    runner: Runner, registry: Registry, rec: ThreadRecord
) -> tuple[LongTask, CompiledStateGraph[Any, Any, Any, Any]]:
    entry = registry.find(rec.task_name)
    task = entry.for_thread(rec) if entry is not None else runner.engine.load(rec)
    return task, runner.graph(task)


def current_state(
    runner: Runner,
    registry: Registry,
    rec: ThreadRecord,
    checkpoint_id: str | None = None,
    *,
    subgraphs: bool = False,
) -> tuple[dict[str, Any], str | None]:
    """The ThreadState, and the checkpoint namespace of the agent step whose conversation
    is its ``values["messages"]`` (None when there is none). ``subgraphs``: a served
    graph's pending subgraph tasks carry their state (a task's agents: see
    ``thread_state``)."""
    task, graph = graph_of(runner, registry, rec)
    if isinstance(task, GraphApp):
        # A plain LangGraph graph served as is: the graph's own state.
        state = plain_state(runner, task, rec, checkpoint_id, subgraphs=subgraphs)
        return state or empty_state(rec.thread_id), None
    snapshot = graph.get_state(config_of(rec.thread_id, checkpoint_id))
    if checkpoint_id is not None:
        head = runner.db.saver.head(rec.thread_id)
        if head is not None and head.config["configurable"]["checkpoint_id"] == checkpoint_id:
            checkpoint_id = None  # the head, named: shown as the thread's state
    finished = rec.status in ("failed", "completed", "cancelled") and checkpoint_id is None
    if not snapshot.config or (not snapshot.values and not snapshot.next):
        return empty_state(rec.thread_id), None
    chat = Conversation(runner, task, rec.thread_id)
    found = None
    if checkpoint_id is None and not finished and chat.shown:
        # The running or paused agent step's conversation, read from its own checkpoints;
        # a past checkpoint has none (the agent's checkpoints are not kept per parent step).
        found = agent_conversation(graph, snapshot)
    live = messages_json(found[1]) if found is not None else []
    state = state_json(runner, snapshot, finished=finished, chat=chat, live=live)
    if checkpoint_id is None:
        _idle_next(state, rec, task)
    return state, (found[0] if found is not None else None)


def _idle_next(state: dict[str, Any], rec: ThreadRecord, task: LongTask) -> None:
    """The head's ``next`` of an idle thread: a state update or a fork left the steps after
    it untriggered, and a run continuing the thread starts those whose dependencies are
    done (see Engine._stream). State and history show the head alike."""
    if rec.status == "pending" and not state["next"]:
        done = set(state["values"])
        state["next"] = [
            name
            for name, info in task.layout.items()
            if name not in done and all(d in done for d in info.depends_on)
        ]


def thread_history(
    runner: Runner,
    registry: Registry,
    rec: ThreadRecord,
    *,
    limit: int,
    before: str | None,
    metadata: dict[str, Any] | None = None,
    at: str | None = None,
) -> list[dict[str, Any]]:
    """The thread's checkpoints, newest first, as LangGraph's server lists them: at most
    ``limit``, older than ``before``, whose metadata holds ``metadata``'s keys and values,
    and only checkpoint ``at`` if given."""
    task, graph = graph_of(runner, registry, rec)
    if isinstance(task, GraphApp):
        return plain_history(
            runner, task, rec, limit=limit, before=before, metadata=metadata, at=at
        )
    chat = Conversation(runner, task, rec.thread_id)
    # The head is shown as the thread's state shows it: of a finished thread, with nothing
    # next and no interrupt (LangGraph keeps the interrupt of a pause that failed it).
    head = runner.db.saver.head(rec.thread_id)
    head_id = head.config["configurable"]["checkpoint_id"] if head is not None else None
    finished = rec.status in ("failed", "completed", "cancelled")
    out = []
    for snap in graph.get_state_history(
        config_of(rec.thread_id, at),
        filter=metadata,
        limit=limit,
        before=config_of(rec.thread_id, before) if before else None,
    ):
        is_head = (snap.config or {}).get("configurable", {}).get("checkpoint_id") == head_id
        state = state_json(runner, snap, finished=finished and is_head, chat=chat)
        if is_head:
            _idle_next(state, rec, task)
        out.append(state)
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
    out: dict[str, Any] = {
        "thread_id": thread_id,
        "created_at": created,
        "updated_at": updated,
        "state_updated_at": updated,
        "metadata": metadata,
        "status": status,
        "config": {"configurable": {}} if rec is not None else {},
        # LangGraph's server: null until a run has written state
        "values": values if rec is not None else None,
    }
    if rec is not None:
        out["interrupts"] = interrupts
        out["error"] = (rec.error or {}).get("message") if rec.status == "failed" else None
    return out
