"""Step kinds and their policies. Pure pydantic: nothing here imports LangGraph."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Retry(BaseModel):
    """How often a step is attempted and how long to wait in between.

    The wait before attempt ``n + 1`` is ``initial_wait * backoff ** (n - 1)``, capped at
    ``max_wait``; with ``jitter`` a random part of up to 10 % is added so that many threads
    failing together do not retry in lockstep.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = 3
    initial_wait: float = 1.0
    backoff: float = 2.0
    max_wait: float = 60.0
    jitter: bool = True

    def problems(self) -> list[str]:
        out = []
        if self.max_attempts < 1:
            out.append(f"max_attempts must be at least 1 (got {self.max_attempts})")
        if self.initial_wait < 0:
            out.append(f"initial_wait must not be negative (got {self.initial_wait})")
        if self.backoff < 1:
            out.append(f"backoff must be at least 1 (got {self.backoff})")
        if self.max_wait < self.initial_wait:
            out.append(
                f"max_wait ({self.max_wait}) must not be smaller than initial_wait "
                f"({self.initial_wait})"
            )
        return out

    def wait_before(self, attempt: int) -> float:
        """Seconds to wait before ``attempt`` (2 for the first retry), without jitter."""
        return float(min(self.max_wait, self.initial_wait * self.backoff ** max(0, attempt - 2)))


def _qualname(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn)))


class Step(BaseModel):
    """Common fields of every step kind. Use the constructors (``function_step``...)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")

    kind: str
    name: str
    after: tuple[str, ...] = ()
    retry: Retry | None = None
    timeout: float | None = None

    @field_validator("after", mode="before")
    @classmethod
    def _after_tuple(cls, v: Any) -> Any:
        if isinstance(v, str):
            return (v,)
        return tuple(v) if v is not None else ()

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout_seconds(cls, v: Any) -> Any:
        return v.total_seconds() if isinstance(v, timedelta) else v

    def problems(self) -> list[str]:
        """Problems with this step's own fields (names and dependencies are checked by the task)."""
        out: list[str] = []
        if self.retry is not None:
            out.extend(f"step {self.name!r}: retry {p}" for p in self.retry.problems())
        if self.timeout is not None and self.timeout <= 0:
            out.append(f"step {self.name!r}: timeout must be greater than 0 (got {self.timeout})")
        return out

    def spec(self) -> dict[str, Any]:
        """The parts of the step that make up the definition hash.

        Function bodies are deliberately left out: fixing a bug in a step and resuming the
        thread is the normal way to recover from a failure. Names, kinds, dependencies and
        policies are what a checkpoint depends on.
        """
        return {
            "kind": self.kind,
            "name": self.name,
            "after": sorted(self.after),
            "retry": self.retry.model_dump() if self.retry else None,
            "timeout": self.timeout,
        }


class FunctionStep(Step):
    """Deterministic Python code: ``fn(ctx) -> result``. ``fn`` may be a coroutine function."""

    kind: Literal["function"] = "function"
    fn: Callable[..., Any]

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "fn": _qualname(self.fn)}


def _as_retry(retry: Retry | int | None) -> Retry | None:
    if isinstance(retry, Retry) or retry is None:
        return retry
    return Retry(max_attempts=int(retry))


@overload
def function_step(
    fn: Callable[..., Any],
    *,
    name: str | None = ...,
    after: Sequence[str] | str = ...,
    retry: Retry | int | None = ...,
    timeout: float | timedelta | None = ...,
) -> FunctionStep: ...


@overload
def function_step(
    fn: None = ...,
    *,
    name: str | None = ...,
    after: Sequence[str] | str = ...,
    retry: Retry | int | None = ...,
    timeout: float | timedelta | None = ...,
) -> Callable[[Callable[..., Any]], FunctionStep]: ...


def function_step(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    after: Sequence[str] | str = (),
    retry: Retry | int | None = None,
    timeout: float | timedelta | None = None,
) -> FunctionStep | Callable[[Callable[..., Any]], FunctionStep]:
    """A step that runs ``fn(ctx)`` and stores what it returns as the step's result.

    Use it as a call, ``function_step(fetch, name="fetch", after=["plan"])``, or as a
    decorator, ``@function_step(after=["plan"])``. ``name`` defaults to the function's name.
    ``retry`` is a :class:`Retry` or a number of attempts; ``timeout`` is in seconds.
    """

    def build(f: Callable[..., Any]) -> FunctionStep:
        if not callable(f):
            raise TypeError(f"function_step needs a callable, got {f!r}")
        return FunctionStep(
            name=name or str(getattr(f, "__name__", "")),
            fn=f,
            after=after,  # type: ignore[arg-type]  # normalised by the validator
            retry=_as_retry(retry),
            timeout=timeout,  # type: ignore[arg-type]  # normalised by the validator
        )

    return build if fn is None else build(fn)


ItemErrorPolicy = Literal["fail", "skip", "collect"]


class MapStep(Step):
    """Runs ``fn(ctx, item)`` once per item of a list known only at run time.

    ``over(ctx)`` computes the items from the task inputs and dependency results. Items run
    in waves of at most ``max_parallel``; each item's result is durable as soon as it
    finishes. The step's result is the list of item results in item order; with
    ``on_item_error="skip"`` failed items are left out, with ``"collect"`` the result is
    ``{"results": [...], "errors": [{"index", "item", "error", "type"}, ...]}``.
    """

    kind: Literal["map"] = "map"
    fn: Callable[..., Any]
    over: Callable[..., Any]
    max_parallel: int = 8
    on_item_error: ItemErrorPolicy = "fail"

    def problems(self) -> list[str]:
        out = super().problems()
        if self.max_parallel < 1:
            out.append(
                f"step {self.name!r}: max_parallel must be at least 1 (got {self.max_parallel})"
            )
        if not callable(self.over):
            out.append(f"step {self.name!r}: over must be a callable over(ctx) -> list")
        return out

    def spec(self) -> dict[str, Any]:
        return {
            **super().spec(),
            "fn": _qualname(self.fn),
            "over": _qualname(self.over),
            "max_parallel": self.max_parallel,
            "on_item_error": self.on_item_error,
        }


@overload
def map_step(
    fn: Callable[..., Any],
    *,
    over: Callable[..., Any],
    name: str | None = ...,
    max_parallel: int = ...,
    after: Sequence[str] | str = ...,
    on_item_error: ItemErrorPolicy = ...,
    retry: Retry | int | None = ...,
    timeout: float | timedelta | None = ...,
) -> MapStep: ...


@overload
def map_step(
    fn: None = ...,
    *,
    over: Callable[..., Any],
    name: str | None = ...,
    max_parallel: int = ...,
    after: Sequence[str] | str = ...,
    on_item_error: ItemErrorPolicy = ...,
    retry: Retry | int | None = ...,
    timeout: float | timedelta | None = ...,
) -> Callable[[Callable[..., Any]], MapStep]: ...


def map_step(
    fn: Callable[..., Any] | None = None,
    *,
    over: Callable[..., Any],
    name: str | None = None,
    max_parallel: int = 8,
    after: Sequence[str] | str = (),
    on_item_error: ItemErrorPolicy = "fail",
    retry: Retry | int | None = None,
    timeout: float | timedelta | None = None,
) -> MapStep | Callable[[Callable[..., Any]], MapStep]:
    """A step that runs ``fn(ctx, item)`` for every item of ``over(ctx)``.

    ``ctx.item`` and ``ctx.item_index`` tell the function which item it has. ``retry`` and
    ``timeout`` apply to each item. Works as a call or as a decorator, like
    :func:`function_step`.
    """

    def build(f: Callable[..., Any]) -> MapStep:
        if not callable(f):
            raise TypeError(f"map_step needs a callable, got {f!r}")
        return MapStep(
            name=name or str(getattr(f, "__name__", "")),
            fn=f,
            over=over,
            max_parallel=max_parallel,
            on_item_error=on_item_error,
            after=after,  # type: ignore[arg-type]  # normalised by the validator
            retry=_as_retry(retry),
            timeout=timeout,  # type: ignore[arg-type]  # normalised by the validator
        )

    return build if fn is None else build(fn)


class Stage(BaseModel):
    """A group of steps. Every step of a stage runs after every step of the previous stage."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    steps: tuple[Step, ...] = Field(default_factory=tuple)

    def __init__(self, name: str, steps: Sequence[Step] = (), **kw: Any) -> None:
        super().__init__(name=name, steps=tuple(steps), **kw)
