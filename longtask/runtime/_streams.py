"""Streaming runs and the async twins of the Runner's calls.

``Runner.stream`` yields LangGraph's own stream parts while the Runner does around the run
what ``start``/``resume`` do (thread record, lock or lease, status, events, cancel watch):
both go through one path, ``Runner._run``. The async calls run the sync ones on a worker
thread: a run holds a writer lock and a database connection that belong to one thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from abc import abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, StreamMode
from pydantic import BaseModel

from longtask.errors import InvalidInput
from longtask.model import LongTask
from longtask.runtime._base import RunnerBase
from longtask.steps import RUN_KEY
from longtask.steps._tracing import activate

#: the config= of the Runner call running on this thread (read by Runner._run)
CALL_CONFIG: contextvars.ContextVar[RunnableConfig | None] = contextvars.ContextVar(
    "longtask_call_config", default=None
)

#: a listener of every stream part of the runs made on this thread while it is set (see
#: ``tapping``): ``serve`` streams a run's parts to its clients from the run itself
CALL_TAP: contextvars.ContextVar[Callable[[tuple[str, ...], str, Any], None] | None] = (
    contextvars.ContextVar("longtask_call_tap", default=None)
)
#: the modes a tap receives, from the task graph and its subgraphs (an agent's conversation)
TAP_MODES: tuple[str, ...] = ("custom", "tasks", "checkpoints", "updates", "values")

_MODES: tuple[str, ...] = get_args(StreamMode)
_CONFIG_KEYS = ("callbacks", "tags", "metadata", "run_name", "configurable", "recursion_limit")
_RUNNER_KEYS = ("thread_id", "checkpoint_ns", "checkpoint_id", RUN_KEY)


def check_config(config: Mapping[str, Any] | None) -> None:
    """Refuse a ``config=`` the Runner cannot honour, before anything is stored."""
    if config is None:
        return
    if not isinstance(config, Mapping):
        raise InvalidInput(f"config must be a dict (a RunnableConfig), got {type(config).__name__}")
    unknown = [k for k in config if k not in _CONFIG_KEYS]
    if unknown:
        raise InvalidInput(
            f"config key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
            f"cannot be given to a Runner call; it takes {', '.join(_CONFIG_KEYS)}"
        )
    taken = [k for k in config.get("configurable") or {} if k in _RUNNER_KEYS]
    if taken:
        raise InvalidInput(
            f"config['configurable'] may not set {', '.join(map(repr, taken))}: the Runner "
            "sets it (pass thread_id as the call's argument)"
        )


def merge_config(base: RunnableConfig, extra: Mapping[str, Any] | None) -> RunnableConfig:
    """``base`` (the Runner's run config) with the caller's callbacks, tags, metadata..."""
    if not extra:
        return base
    merged: dict[str, Any] = {**extra, **{k: v for k, v in base.items() if k != "configurable"}}
    merged["configurable"] = {**(extra.get("configurable") or {}), **base["configurable"]}
    return merged  # type: ignore[return-value]


@contextlib.contextmanager
def using_config(config: Mapping[str, Any] | None) -> Iterator[None]:
    check_config(config)
    token = CALL_CONFIG.set(dict(config) if config else None)  # type: ignore[arg-type]
    try:
        yield
    finally:
        CALL_CONFIG.reset(token)


@dataclass(frozen=True)
class StreamSpec:
    """What a caller streams: LangGraph's modes, one (parts are chunks) or a list (parts are
    ``(mode, chunk)``), and whether subgraphs' parts come too (``(namespace, ...)``)."""

    modes: tuple[str, ...] = ()
    single: bool = True
    subgraphs: bool = False

    @classmethod
    def of(cls, stream_mode: str | Sequence[str], subgraphs: bool) -> StreamSpec:
        single = isinstance(stream_mode, str)
        modes = (stream_mode,) if isinstance(stream_mode, str) else tuple(stream_mode)
        bad = [m for m in modes if m not in _MODES]
        if bad or not modes:
            raise InvalidInput(
                f"stream_mode {', '.join(map(repr, bad)) or 'is empty'}: "
                f"use one or more of {', '.join(_MODES)}"
            )
        return cls(modes, single, bool(subgraphs))

    def graph_modes(self) -> list[StreamMode]:
        """The modes asked of LangGraph: the caller's and the updates the Runner reads."""
        return sorted({"updates", *self.modes})  # type: ignore[arg-type]

    def part(self, ns: tuple[str, ...], mode: str, chunk: Any) -> Any:
        body = chunk if self.single else (mode, chunk)
        if not self.subgraphs:
            return body
        return (ns, body) if self.single else (ns, mode, chunk)


@contextlib.contextmanager
def tapping(listener: Callable[[tuple[str, ...], str, Any], None]) -> Iterator[None]:
    """Runs made on this thread inside the block send every part of ``TAP_MODES`` to
    ``listener(namespace, mode, chunk)`` as LangGraph yields it, in order: the run's own
    stream, whatever the caller streams. The listener must not raise."""
    token = CALL_TAP.set(listener)
    try:
        yield
    finally:
        CALL_TAP.reset(token)


def traced(parts: Iterator[Any], root: Any) -> Iterator[Any]:
    """``parts`` with ``root`` (the run's span) current while LangGraph computes each one, so
    node spans are its children, and not current in the caller between parts."""
    try:
        while True:
            with activate(root):
                try:
                    part = next(parts)
                except StopIteration:
                    return
            yield part
    finally:
        close = getattr(parts, "close", None)
        if close is not None:
            close()


_END = object()


class StreamMixin(RunnerBase):
    """``stream``/``astream`` and ``astart``, ``aresume``, ``aapprove``, ``asignal``."""

    @abstractmethod
    def _start_run(
        self,
        task: LongTask,
        inputs: Mapping[str, Any] | BaseModel | None,
        thread_id: str | None,
        task_ref: str | None,
        spec: StreamSpec,
        config: Mapping[str, Any] | None,
    ) -> tuple[str, Iterator[Any]]: ...

    @abstractmethod
    def _resume_run(
        self,
        thread_id: str,
        command: Command[Any] | None,
        *,
        task: LongTask | None,
        allow_changed_definition: bool,
        spec: StreamSpec,
        config: Mapping[str, Any] | None,
    ) -> Iterator[Any]: ...

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
    ) -> Iterator[Any]:
        """Start ``task`` (or, with ``resume=True`` or a ``command``, continue thread
        ``thread_id``) and yield LangGraph's stream parts as ``graph.stream`` would with
        ``stream_mode`` and ``subgraphs``. The run is the one ``start``/``resume`` make:
        same records, lock, statuses and errors (raised from the iteration). Give
        ``thread_id`` to know a new thread's id. A step's events (progress, retries, model
        calls...) come as ``custom`` parts ``{"longtask": kind, "step": ..., "data": ...}``.
        Stopping the iteration early stops the run there: the thread stays ``running``, as
        after a crash, and ``resume`` continues it.
        """
        spec = StreamSpec.of(stream_mode, subgraphs)
        check_config(config)
        if resume or command is not None:
            if thread_id is None:
                raise InvalidInput("stream(resume=True) needs the thread_id of the thread to go on")
            return self._resume_run(
                thread_id,
                command,
                task=task,
                allow_changed_definition=allow_changed_definition,
                spec=spec,
                config=config,
            )
        if task is None:
            raise InvalidInput("stream() needs the task to start (or resume=True and a thread_id)")
        return self._start_run(task, inputs, thread_id, task_ref, spec, config)[1]

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
        return await asyncio.to_thread(self.start, *args, **kwargs)  # type: ignore[attr-defined]

    async def aresume(self, *args: Any, **kwargs: Any) -> str:
        """``resume`` on a worker thread."""
        return await asyncio.to_thread(self.resume, *args, **kwargs)

    async def aapprove(self, *args: Any, **kwargs: Any) -> str:
        """``approve`` on a worker thread."""
        return await asyncio.to_thread(self.approve, *args, **kwargs)  # type: ignore[attr-defined]

    async def areject(self, *args: Any, **kwargs: Any) -> str:
        """``reject`` on a worker thread."""
        return await asyncio.to_thread(self.reject, *args, **kwargs)  # type: ignore[attr-defined]

    async def asignal(self, *args: Any, **kwargs: Any) -> str:
        """``signal`` on a worker thread."""
        return await asyncio.to_thread(self.signal, *args, **kwargs)  # type: ignore[attr-defined]
