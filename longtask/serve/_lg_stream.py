"""A run's stream in the LangGraph Server API's SSE format, made by following the thread.

No task runs here: the executor advances the thread, and the stream reads what it stored —
a new checkpoint gives ``values`` (every result so far) and ``updates`` (the steps whose
results are new, and ``__interrupt__`` when it pauses); new longtask events give ``custom``
(the event as longtask stores it) and ``events`` (an ``on_custom_event`` per event). The
stream ends when the run is finished and everything it stored was sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio

from longtask.serve._executor import FINAL_RUN
from longtask.serve._lg_state import plain, thread_state

if TYPE_CHECKING:
    from longtask.serve._lg_common import Api

#: stream modes this server answers; the others are accepted and yield nothing
MODES = frozenset(
    {"values", "updates", "custom", "events", "debug", "messages", "messages-tuple", "tasks"}
)


def sse(event: str, data: Any) -> bytes:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"event: {event}\ndata: {text}\n\n".encode()


def modes_of(raw: Any) -> set[str]:
    if raw is None:
        return {"values"}
    items = [raw] if isinstance(raw, str) else list(raw)
    return {str(m) for m in items}


class _Reader:
    """The thread as one run's stream last saw it."""

    def __init__(self, api: Api, thread_id: str, since_event: int, before: dict[str, Any]) -> None:
        self.api = api
        self.thread_id = thread_id
        self.last_event = since_event
        self.checkpoint: str | None = None
        #: results the thread had when the run was created: not updates of this run
        self.values: dict[str, Any] = before
        self.interrupts: list[Any] = []

    def read(self) -> tuple[dict[str, Any] | None, list[Any]]:
        """(the new state if the checkpoint changed, the new events)."""
        runner = self.api.runner
        rec = runner.db.store.get_thread(self.thread_id)
        if rec is None:
            return None, []
        events = runner.db.store.events(self.thread_id, since=self.last_event, limit=500)
        if events:
            self.last_event = events[-1].id
        state = thread_state(runner, self.api.registry, rec)
        key = json.dumps(
            [state["checkpoint"].get("checkpoint_id"), rec.status, len(state["interrupts"])]
        )
        if key == self.checkpoint:
            return None, events
        self.checkpoint = key
        return state, events


async def follow(
    api: Api,
    run_id: str,
    thread_id: str,
    modes: set[str],
    since_event: int,
    before: dict[str, Any],
) -> AsyncIterator[bytes]:
    yield sse("metadata", {"run_id": run_id, "attempt": 1})
    reader = _Reader(api, thread_id, since_event, before)
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
        if done and state is None and not events:
            if run is not None and run.status == "error":
                yield sse("error", {"error": "RunError", "message": run.error or "the run failed"})
            return
        if not events and state is None:
            await anyio.sleep(0.15)


def _state_parts(
    reader: _Reader, state: dict[str, Any], modes: set[str], first: bool
) -> list[bytes]:
    out = []
    values = state["values"]
    if "updates" in modes:
        for step, value in values.items():
            if step not in reader.values or reader.values[step] != value:
                out.append(sse("updates", {step: value}))
        interrupts = state["interrupts"]
        if interrupts and interrupts != reader.interrupts:
            out.append(sse("updates", {"__interrupt__": interrupts}))
    if "values" in modes and (values != reader.values or first):
        out.append(sse("values", values))
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
