"""One event loop per process for the async code steps run (async step functions, graphs
whose nodes are async only, async tools behind the ledger), on a thread of its own.

Steps run in LangGraph's synchronous runner, so async code needs a loop to run on. A new
loop per call (``asyncio.run``) breaks the clients libraries keep between calls: LangChain's
OpenAI models share one ``httpx.AsyncClient`` per process, bound to the loop it first ran
on, and the next call on another loop fails with "Event loop is closed". One loop that lives
as long as the process is what those clients expect (LangGraph's server runs one too). The
caller's context variables (the step's context, LangGraph's config) go with the call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["run_coroutine"]

_lock = threading.Lock()
#: (process id, loop, its thread): a forked child makes its own, the thread is not copied
_shared: tuple[int, asyncio.AbstractEventLoop, threading.Thread] | None = None


def _loop() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    global _shared
    with _lock:
        if _shared is None or _shared[0] != os.getpid() or not _shared[2].is_alive():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="longtask-async", daemon=True)
            thread.start()
            _shared = (os.getpid(), loop, thread)
        return _shared[1], _shared[2]


def run_coroutine(make: Callable[[], Coroutine[Any, Any, T]], timeout: float | None = None) -> T:
    """``await make()`` on the process's loop, from a thread that is not running a loop;
    its result or its exception. ``TimeoutError`` after ``timeout`` seconds (the coroutine
    is cancelled). Called from code running on that loop itself (a sync function a
    coroutine calls), it runs on a loop of its own in another thread, as waiting here
    would stop the loop that has to run it."""
    loop, thread = _loop()
    if threading.current_thread() is thread:
        return _elsewhere(make, timeout)
    done: concurrent.futures.Future[T] = concurrent.futures.Future()
    started: list[asyncio.Task[T]] = []

    def start() -> None:
        # in the caller's context (call_soon_threadsafe's), which the task copies
        task = loop.create_task(make())
        started.append(task)

        def finished(t: asyncio.Task[T]) -> None:
            if t.cancelled():
                done.set_exception(TimeoutError("cancelled"))
            elif (exc := t.exception()) is not None:
                done.set_exception(exc)
            else:
                done.set_result(t.result())

        task.add_done_callback(finished)

    loop.call_soon_threadsafe(start, context=contextvars.copy_context())
    try:
        return done.result(timeout)
    except BaseException:
        if started and not started[0].done():
            loop.call_soon_threadsafe(started[0].cancel)
        raise


def _elsewhere(make: Callable[[], Coroutine[Any, Any, T]], timeout: float | None) -> T:
    ctx = contextvars.copy_context()

    async def main() -> T:
        return await asyncio.wait_for(make(), timeout)

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="longtask-async") as pool:
        return pool.submit(ctx.run, asyncio.run, main()).result()
