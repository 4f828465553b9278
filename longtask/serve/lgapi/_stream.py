"""A run's stream in the LangGraph Server API's SSE format.

No task runs here: the executor (or a worker) advances the thread and stores the run's
parts as they come (``longtask.runtime._parts``); ``follow`` reads them from the run's start
mark to its end mark, whichever process wrote them, and turns them into events (``live``),
each with an id a reconnecting client resumes after. A run whose parts are gone (kept an
hour) or were never stored follows what the thread stores instead — a new checkpoint gives
``values`` (every result so far) and ``updates`` (the steps whose results are new, and
``__interrupt__`` when it pauses); new longtask events give ``custom`` (the event as longtask
stores it) and ``events`` (an ``on_custom_event`` per event); new messages of the run's agent
steps give ``messages-tuple`` (``[message, metadata]``) and ``messages``
(``messages/metadata`` then ``messages/complete``): whole messages, read from the agent's own
checkpoints (its namespace is in its ``agent.run.started`` event), so a step that ends
between two reads is not missed. The stream ends when the run is finished and everything it
stored was sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
from starlette.exceptions import HTTPException

from longtask.graphs import read_agent_messages
from longtask.runtime import parts_of
from longtask.serve._executor import FINAL_RUN
from longtask.serve.lgapi._json import plain, sse
from longtask.serve.lgapi._live import LiveParts
from longtask.serve.lgapi._state import current_state, graph_of
from longtask.store._parts import END, START

if TYPE_CHECKING:
    from longtask.model import LongTask
    from longtask.serve.lgapi._common import Api

#: stream modes this server answers; the others are accepted and yield nothing
MODES = frozenset(
    {
        "values",
        "updates",
        "custom",
        "events",
        "debug",
        "messages",
        "messages-tuple",
        "tasks",
        "checkpoints",
    }
)


def modes_of(raw: Any) -> set[str]:
    if raw is None:
        return {"values"}
    items = [raw] if isinstance(raw, str) else list(raw)
    return {str(m) for m in items}


def query_modes(raw: list[str]) -> list[str]:
    """The modes a join's ``stream_mode`` query parameters name, given once per mode or as
    one JSON list (``["values","updates"]``, as the SDKs send a list); an empty one (what
    the Python SDK sends for its default, None) names none: the run's own modes."""
    out: list[str] = []
    for item in raw:
        if item.startswith("["):
            try:
                listed = json.loads(item)
            except ValueError:
                listed = None
            if isinstance(listed, list):
                out.extend(str(m) for m in listed if m)
                continue
        if item:
            out.append(item)
    return out


def checked_modes(raw: Any) -> set[str]:
    """A run's (or a cron's) ``stream_mode`` as ``modes_of`` reads it, refused whole (422, as
    LangGraph's server refuses a mode it does not know) if it names one this server does
    not stream."""
    if raw is not None and not isinstance(raw, str | list):
        raise HTTPException(422, f"stream_mode must be a mode or a list of modes, not {raw!r}")
    modes = modes_of(raw)
    unknown = modes - MODES
    if unknown:
        raise HTTPException(
            422,
            f"unknown stream mode {', '.join(sorted(unknown))}; this server streams "
            f"{', '.join(sorted(MODES))}",
        )
    return modes


class _Reader:
    """The thread as one run's stream last saw it."""

    def __init__(
        self,
        api: Api,
        thread_id: str,
        since_event: int,
        before: dict[str, Any],
        before_agent: dict[str, Any],
    ) -> None:
        self.api = api
        self.thread_id = thread_id
        self.last_event = since_event
        self.checkpoint: str | None = None
        #: results the thread had when the run was created: not updates of this run
        self.values: dict[str, Any] = before
        self.interrupts: list[Any] = []
        #: ids of the agent messages sent (or there before the run)
        self.sent: set[str] = set(before_agent.get("ids") or ())
        #: namespace of the agent step whose conversation is values["messages"]
        self.agent: str | None = None
        #: namespaces of the agents of this run whose messages to send: (ns, step done)
        self.agents: dict[str, bool] = {}
        if before_agent.get("ns"):
            self.agents[before_agent["ns"]] = False

    def read(self) -> tuple[dict[str, Any] | None, list[Any]]:
        """(the new state if the checkpoint changed, the new events)."""
        runner = self.api.runner
        rec = runner.db.store.get_thread(self.thread_id)
        if rec is None:
            return None, []
        events = runner.db.store.events(self.thread_id, since=self.last_event, limit=500)
        if events:
            self.last_event = events[-1].id
        state, self.agent = current_state(runner, self.api.registry, rec)
        # An agent's turns are checkpointed in its own namespace: its message count is part
        # of what changed.
        talk = len(state["values"].get("messages") or ()) if self.agent else 0
        key = json.dumps(
            [
                (state["checkpoint"] or {}).get("checkpoint_id"),
                rec.status,
                len(state["interrupts"]),
                talk,
            ]
        )
        for event in events:
            ns = event.data.get("checkpoint_ns") if event.kind.startswith("agent.run.") else None
            if isinstance(ns, str) and ns:
                self.agents[ns] = event.kind == "agent.run.completed"
        if key == self.checkpoint:
            return None, events
        self.checkpoint = key
        return state, events

    def said(self, run_id: str, modes: set[str]) -> list[bytes]:
        """The agents' messages not sent yet (the prompt is the run's input, which
        LangGraph does not stream either); an agent whose step is done is read once more."""
        runner = self.api.runner
        rec = runner.db.store.get_thread(self.thread_id)
        if rec is None or not self.agents:
            return []
        graph = graph_of(runner, self.api.registry, rec)[1]
        out = []
        for ns, done in list(self.agents.items()):
            if done:
                del self.agents[ns]
            node = ns.rsplit("|", 1)[-1].split(":", 1)[0]
            for message in plain(read_agent_messages(graph, self.thread_id, ns)):
                mid = message.get("id")
                if not mid or mid in self.sent:
                    continue
                self.sent.add(mid)
                if message.get("type") == "human":
                    continue
                meta = {"run_id": run_id, "thread_id": self.thread_id, "langgraph_node": node}
                if "messages-tuple" in modes:
                    out.append(sse("messages", [message, meta]))
                if "messages" in modes:
                    out.append(sse("messages/metadata", {mid: {"metadata": meta}}))
                    out.append(sse("messages/complete", [message]))
        return out


def event_id(raw: str | None) -> tuple[int, int] | None:
    """A ``Last-Event-ID`` of a run's stream as ``(part, index)``; None if it is none."""
    if not raw:
        return None
    seq, _, index = raw.strip().partition("-")
    try:
        return int(seq), int(index or 0)
    except ValueError:
        return None


def _with_id(seq: int, index: int, chunk: bytes) -> bytes:
    return f"id: {seq}-{index}\n".encode() + chunk


async def follow(
    api: Api,
    run_id: str,
    thread_id: str,
    modes: set[str],
    since_event: int,
    before: dict[str, Any],
    before_agent: dict[str, Any] | None = None,
    *,
    task: LongTask | None = None,
    subgraphs: bool = False,
    metadata: dict[str, Any] | None = None,
    after: str | None = None,
) -> AsyncIterator[bytes]:
    """The run's stream, made from the parts the process advancing the thread stores (see
    ``longtask.runtime._parts``), whichever process that is: every event has an id
    (``part-index``) and ``after`` (a ``Last-Event-ID``) sends only those after it. A run
    whose parts are gone (or never stored: it ended before it started) is followed in
    what the thread stores instead."""
    resume = event_id(after)
    said = sse("metadata", {"run_id": run_id, "attempt": 1})
    store = api.runner.db.store
    start = await api.call(store.parts_start, thread_id, run_id)
    while start is None:
        run = await api.call(store.api_run, run_id)
        if run is None or run.status in FINAL_RUN:
            break
        await anyio.sleep(_POLL)
        start = await api.call(store.parts_start, thread_id, run_id)
    if start is None or task is None:
        yield said
        async for chunk in _follow_stored(
            api, run_id, thread_id, modes, since_event, before, before_agent
        ):
            yield chunk
        return
    rec = await api.call(store.get_thread, thread_id)
    entry = api.registry.find(rec.task_name) if rec is not None else None
    if rec is not None and entry is not None:
        task = entry.for_thread(rec)  # a thread started on an older version keeps it
    made = await api.call(store.api_thread, thread_id)
    parts = LiveParts(
        api.runner,
        task,
        run_id,
        thread_id,
        modes,
        subgraphs,
        list((before_agent or {}).get("ids") or ()),
        {**(made[0] if made else {}), **(metadata or {})},
    )
    reader = _Parts(api, parts, thread_id, run_id, start, resume)
    for chunk in reader.shown(start, [said, *parts.start()]):
        yield chunk
    ended_at: float | None = None
    while True:
        chunks, end = await api.call(reader.next)
        for chunk in chunks:
            yield chunk
        if end is None and not chunks:
            # No end mark (a run another path ended, or whose process died after its
            # end was recorded): over once its status is final and no part came for a while.
            run = await api.call(store.api_run, run_id)
            if run is None or run.status in FINAL_RUN:
                ended_at = ended_at if ended_at is not None else time.monotonic()
                if time.monotonic() - ended_at > _QUIET:
                    end = reader.last
            await anyio.sleep(_POLL)
        if end is None:
            continue
        tail: list[bytes] = []
        if modes & {"custom", "events"}:
            stored = await api.call(store.events, thread_id, since=since_event, limit=5000)
            tail += await api.call(parts.stored, stored)
        run = await api.call(store.api_run, run_id)
        if run is not None and run.status == "error":
            tail.append(sse("error", {"error": "RunError", "message": run.error or "run failed"}))
        for chunk in reader.shown(end, tail):
            yield chunk
        return


#: seconds between reads of a run's new parts
_POLL = 0.1
#: seconds a run with a final status and no end mark is followed before its stream ends
_QUIET = 2.0


class _Parts:
    """A run's stored parts, read in order and made into its events for one client."""

    def __init__(
        self,
        api: Api,
        parts: LiveParts,
        thread_id: str,
        run_id: str,
        start: int,
        resume: tuple[int, int] | None,
    ) -> None:
        self.api = api
        self.parts = parts
        self.thread_id = thread_id
        self.run_id = run_id
        self.last = start
        self.resume = resume

    def shown(self, seq: int, chunks: list[bytes]) -> list[bytes]:
        """``chunks`` of part ``seq`` with their ids, but those a resumed client had."""
        return [
            _with_id(seq, i, c)
            for i, c in enumerate(chunks)
            if self.resume is None or (seq, i) > self.resume
        ]

    def next(self) -> tuple[list[bytes], int | None]:
        """(the events of the parts stored since the last read, the seq of the run's end
        mark if it was read)."""
        runner = self.api.runner
        rows = runner.db.store.parts_after(self.thread_id, self.last)
        out: list[bytes] = []
        for row in rows:
            self.last = row.seq
            if row.mode in (START, END):
                if row.mode == END and row.run_id == self.run_id:
                    return out, row.seq
                if row.mode == START and row.run_id != self.run_id:
                    # A thread's runs are carried out one at a time: the next one started,
                    # so this one ended (a process died before it marked the end).
                    return out, row.seq
                continue
            chunk = parts_of(runner.db.saver.serde, row.type, row.body)
            ns = tuple(row.ns.split("|")) if row.ns else ()
            out += self.shown(row.seq, self.parts.convert(ns, row.mode, chunk))
        return out, None


async def _follow_stored(
    api: Api,
    run_id: str,
    thread_id: str,
    modes: set[str],
    since_event: int,
    before: dict[str, Any],
    before_agent: dict[str, Any] | None = None,
) -> AsyncIterator[bytes]:
    reader = _Reader(api, thread_id, since_event, before, before_agent or {})
    talk = bool(modes & {"messages", "messages-tuple"})
    store = api.runner.db.store
    first = True
    while True:
        run = await api.call(store.api_run, run_id)
        done = run is None or run.status in FINAL_RUN
        state, events = await api.call(reader.read)
        if state is not None:
            for part in _state_parts(reader, state, modes, first):
                yield part
            first = False
        for event in events:
            data = event.to_json()
            if "custom" in modes:
                yield sse("custom", data)
            if "events" in modes:
                yield sse(
                    "events",
                    {
                        "event": "on_custom_event",
                        "name": event.kind,
                        "run_id": run_id,
                        "data": data,
                        "tags": [],
                        "metadata": {"thread_id": thread_id, "langgraph_node": event.step},
                    },
                )
        said = await api.call(reader.said, run_id, modes) if talk else []
        for part in said:
            yield part
        if done and state is None and not events and not said:
            if run is not None and run.status == "error":
                yield sse("error", {"error": "RunError", "message": run.error or "the run failed"})
            return
        if not events and state is None and not said:
            await anyio.sleep(0.15)


def _state_parts(
    reader: _Reader, state: dict[str, Any], modes: set[str], first: bool
) -> list[bytes]:
    out = []
    values = state["values"]
    if "updates" in modes:
        for step, value in values.items():
            if step == "messages" and reader.agent is not None:
                continue  # the agent's conversation, not a step's update
            if step not in reader.values or reader.values[step] != value:
                out.append(sse("updates", {step: {step: value}}))
        interrupts = state["interrupts"]
        if interrupts and interrupts != reader.interrupts:
            out.append(sse("updates", {"__interrupt__": interrupts}))
    if "values" in modes and (values != reader.values or first):
        shown = values
        if state["interrupts"] and state["interrupts"] != reader.interrupts:
            shown = {**values, "__interrupt__": state["interrupts"]}  # as LangGraph's stream
        out.append(sse("values", shown))
    if "debug" in modes:
        out.append(
            sse(
                "debug",
                {
                    "type": "checkpoint",
                    "timestamp": state["created_at"],
                    "step": (state["metadata"] or {}).get("step"),
                    "payload": plain(state),
                },
            )
        )
    reader.values = values
    reader.interrupts = state["interrupts"]
    return out
