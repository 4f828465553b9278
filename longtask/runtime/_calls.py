"""What a Runner call carries into its run: the caller's LangGraph ``config`` (callbacks,
tags, metadata), a tap that sees every stream part (``serve``), and which stream parts the
caller reads (:class:`StreamSpec`). The run core reads them in ``Engine``'s run."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from langchain_core.runnables import RunnableConfig
from langgraph.types import StreamMode

from longtask.errors import InvalidInput
from longtask.steps import RUN_KEY
from longtask.steps._tracing import activate

#: the config= of the Runner call running on this thread (read by Engine._run)
CALL_CONFIG: contextvars.ContextVar[RunnableConfig | None] = contextvars.ContextVar(
    "longtask_call_config", default=None
)

#: a listener of every stream part of the runs made on this thread while it is set (see
#: ``tapping``): ``serve`` streams a run's parts to its clients from the run itself
CALL_TAP: contextvars.ContextVar[
    tuple[Callable[[tuple[str, ...], str, Any], None], tuple[str, ...]] | None
] = contextvars.ContextVar("longtask_call_tap", default=None)
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
def tapping(
    listener: Callable[[tuple[str, ...], str, Any], None], modes: Sequence[str] = ()
) -> Iterator[None]:
    """Runs made on this thread inside the block send every part of ``TAP_MODES`` (and of
    ``modes``: ``messages`` for tokens) to ``listener(namespace, mode, chunk)`` as LangGraph
    yields it, in order: the run's own stream, whatever the caller streams. The listener
    must not raise."""
    token = CALL_TAP.set((listener, tuple(modes)))
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
