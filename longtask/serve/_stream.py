"""Server-Sent Events of one thread's event log.

Each event is sent once, in id order: the stream remembers the last id it sent and asks the
Runner only for later ones, so a reconnect with ``Last-Event-ID`` gets exactly what it
missed. The stream ends when the thread is completed, failed or cancelled and every event
before that was sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import anyio
from starlette.concurrency import run_in_threadpool

from longtask.store import FINAL_STATUSES

if TYPE_CHECKING:
    from longtask._runner import Runner
    from longtask.store import Event

FINAL = frozenset(FINAL_STATUSES)
#: events that usually mean the thread just reached a final status
FINAL_KINDS = frozenset({"longtask.completed", "longtask.failed", "longtask.cancelled"})
BATCH = 500
#: how long the browser waits before it reconnects after the stream ended or broke
RETRY_MS = 3000


def sse_event(event: Event) -> bytes:
    # json.dumps escapes newlines inside strings, so the data is always one line.
    data = json.dumps(event.to_json(), ensure_ascii=False, separators=(",", ":"))
    return f"id: {event.id}\nevent: {event.kind}\ndata: {data}\n\n".encode()


class EventStream:
    """Settings shared by every stream of one app."""

    def __init__(
        self,
        runner: Runner,
        *,
        poll: float,
        heartbeat: float,
        status_every: float = 1.0,
    ) -> None:
        self.runner = runner
        self.poll = poll
        self.heartbeat = heartbeat
        self.status_every = status_every
        wait: Callable[[str, float], Any] | None = getattr(runner, "wait_events", None)
        self.wait_events = wait

    async def _idle(self, thread_id: str) -> None:
        if self.wait_events is None:
            await anyio.sleep(self.poll)
            return
        # Bounded, so that a heartbeat is due and a closed connection is noticed in time.
        await run_in_threadpool(
            self.wait_events, thread_id, max(self.poll, min(1.0, self.heartbeat))
        )

    async def _status(self, thread_id: str) -> str:
        status = await run_in_threadpool(self.runner.status, thread_id)
        return status.status

    async def _events(self, thread_id: str, since: int) -> list[Event]:
        return await run_in_threadpool(self.runner.events, thread_id, since=since, limit=BATCH)

    async def stream(self, thread_id: str, since: int) -> AsyncIterator[bytes]:
        last = since
        yield f"retry: {RETRY_MS}\n\n".encode()
        last_write = time.monotonic()
        next_status = 0.0  # check the status on the first idle round
        while True:
            batch = await self._events(thread_id, last)
            for event in batch:
                if event.id <= last:
                    continue  # never twice, whatever the store returns
                yield sse_event(event)
                last = event.id
                last_write = time.monotonic()
                if event.kind in FINAL_KINDS:
                    next_status = 0.0
            if len(batch) >= BATCH:
                continue  # more are waiting: no pause between pages
            now = time.monotonic()
            if not batch and now >= next_status:
                next_status = now + self.status_every
                # Status before events: the Runner stores a thread's events before its final
                # status, so the read after a final status sees all of them.
                if await self._status(thread_id) in FINAL:
                    for event in await self._drain(thread_id, last):
                        yield sse_event(event)
                    return
            if time.monotonic() - last_write >= self.heartbeat:
                yield b": heartbeat\n\n"
                last_write = time.monotonic()
            await self._idle(thread_id)

    async def _drain(self, thread_id: str, since: int) -> list[Event]:
        out: list[Event] = []
        while True:
            batch = [e for e in await self._events(thread_id, since) if e.id > since]
            out.extend(batch)
            if len(batch) < BATCH:
                return out
            since = batch[-1].id
