"""Streaming runs and the async twins of the Runner's calls.

``Runner.stream`` yields LangGraph's own stream parts while the run core does around the
run what ``start``/``resume`` do (thread record, lock or lease, status, events, cancel
watch): both go through one path, ``Engine``'s run. The async calls run the sync ones on a
worker thread: a run holds a writer lock and a database connection that belong to one
thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command
from pydantic import BaseModel

from longtask.errors import InvalidInput
from longtask.model import LongTask
from longtask.runtime._calls import StreamSpec, check_config

if TYPE_CHECKING:
    from longtask.runtime._engine import Engine
    from longtask.runtime._pauses import Pauses

_END = object()


class Streams:
    """Runs as streams: ``stream``/``astream``/``astream_events`` of a start or a resume
    (``engine``'s runs, read part by part), and the asyncio twins of start, resume and the
    answers (``pauses``)."""

    def __init__(self, engine: Engine, pauses: Pauses) -> None:
        self._engine = engine
        self._pauses = pauses

    def stream(
        self,
        task: LongTask | None = None,
        inputs: Mapping[str, Any] | BaseModel | None = None,
        thread_id: str | None = None,
        *,
        resume: bool = False,
        command: Command[Any] | None = None,
        stream_mode: str | Sequence[str] = "updates",
        subgraphs: bool = False,
        config: Mapping[str, Any] | None = None,
        task_ref: str | None = None,
        allow_changed_definition: bool = False,
        context: Mapping[str, Any] | None = None,
    ) -> Iterator[Any]:
        """Start ``task`` (or, with ``resume=True`` or a ``command``, continue thread
        ``thread_id``) and yield LangGraph's stream parts as ``graph.stream`` would with
        ``stream_mode`` and ``subgraphs``. The run is the one ``start``/``resume`` make:
        same records, lock, statuses and errors (raised from the iteration). Give
        ``thread_id`` to know a new thread's id. A step's events (progress, retries, model
        calls...) come as ``custom`` parts ``{"longtask": kind, "step": ..., "data": ...}``.
        Stopping the iteration early stops the run there: the thread stays ``running``, as
        after a crash, and ``resume`` continues it. ``context``: a new thread's run context
        (as for ``start``).
        """
        spec = StreamSpec.of(stream_mode, subgraphs)
        check_config(config)
        if resume or command is not None:
            if thread_id is None:
                raise InvalidInput("stream(resume=True) needs the thread_id of the thread to go on")
            return self._engine.resume_run(
                thread_id,
                command,
                task=task,
                allow_changed_definition=allow_changed_definition,
                spec=spec,
                config=config,
            )
        if task is None:
            raise InvalidInput("stream() needs the task to start (or resume=True and a thread_id)")
        return self._engine.start_run(
            task, inputs, thread_id, task_ref, spec, config, context=context
        )[1]

    async def astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """``stream`` for asyncio: the run goes on a worker thread, its parts come here."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[bool, Any]] = asyncio.Queue()
        stop = threading.Event()
        parts = self.stream(*args, **kwargs)  # bad arguments raise here, not in the thread

        def pump() -> None:
            try:
                for part in parts:
                    loop.call_soon_threadsafe(queue.put_nowait, (True, part))
                    if stop.is_set():
                        break
            except BaseException as exc:
                loop.call_soon_threadsafe(queue.put_nowait, (False, exc))
            else:
                loop.call_soon_threadsafe(queue.put_nowait, (False, _END))
            finally:
                close = getattr(parts, "close", None)
                if close is not None:
                    close()

        worker = asyncio.ensure_future(asyncio.to_thread(pump))
        try:
            while True:
                ok, item = await queue.get()
                if ok:
                    yield item
                elif item is _END:
                    break
                else:
                    raise item
        finally:
            # Left early: the run stops at its next part (see stream); wait for its lock
            # to be released.
            stop.set()
            await worker

    async def astream_events(
        self,
        /,
        task: LongTask | None = None,
        inputs: Mapping[str, Any] | BaseModel | None = None,
        thread_id: str | None = None,
        *,
        resume: bool = False,
        command: Command[Any] | None = None,
        config: Mapping[str, Any] | None = None,
        task_ref: str | None = None,
        allow_changed_definition: bool = False,
        version: Any = "v2",
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        """LangChain's ``astream_events`` of one run (started or continued as ``stream``
        does): one tree of events, rooted at a chain named ``config["run_name"]`` (else
        "longtask"), with the task graph and its steps under it."""
        from langchain_core.runnables import RunnableLambda

        check_config(config)

        def run(_: Any, config: RunnableConfig) -> None:
            parts = self.stream(
                task,
                inputs,
                thread_id,
                resume=resume,
                command=command,
                config=config,
                task_ref=task_ref,
                allow_changed_definition=allow_changed_definition,
            )
            for _part in parts:
                pass

        name = str((config or {}).get("run_name") or "longtask")
        chain = RunnableLambda(run, name=name)
        async for event in chain.astream_events(
            None,
            dict(config) if config else None,  # type: ignore[arg-type]
            version=version,
            **kwargs,
        ):
            yield event

    async def astart(self, *args: Any, **kwargs: Any) -> str:
        """``start`` on a worker thread."""
        return await asyncio.to_thread(self._engine.start, *args, **kwargs)

    async def aresume(self, *args: Any, **kwargs: Any) -> str:
        """``resume`` on a worker thread."""
        return await asyncio.to_thread(self._engine.resume, *args, **kwargs)

    async def aapprove(self, *args: Any, **kwargs: Any) -> str:
        """``approve`` on a worker thread."""
        return await asyncio.to_thread(self._pauses.approve, *args, **kwargs)

    async def areject(self, *args: Any, **kwargs: Any) -> str:
        """``reject`` on a worker thread."""
        return await asyncio.to_thread(self._pauses.reject, *args, **kwargs)

    async def asignal(self, *args: Any, **kwargs: Any) -> str:
        """``signal`` on a worker thread."""
        return await asyncio.to_thread(self._pauses.signal, *args, **kwargs)
