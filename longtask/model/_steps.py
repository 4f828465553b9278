"""Step kinds and their policies. Pure pydantic: nothing here imports LangGraph."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, field_validator

from longtask.model._notify import Notify, as_notify


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


class Budget(BaseModel):
    """Limits on what a thread may use: LLM ``tokens``, ``cost`` (in the price table's
    currency), ``tool_calls`` and ``wall_time`` (seconds spent running steps, waits for
    people not counted). None means unlimited. Checked before every step starts (and, for
    agents, before every model call); steps report usage with ``ctx.charge``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens: int | None = None
    cost: float | None = None
    tool_calls: int | None = None
    wall_time: float | None = None

    @field_validator("wall_time", mode="before")
    @classmethod
    def _seconds(cls, v: Any) -> Any:
        return v.total_seconds() if isinstance(v, timedelta) else v

    def problems(self) -> list[str]:
        return [
            f"budget {name} must be greater than 0 (got {value})"
            for name, value in self.limits().items()
            if value is not None and value <= 0
        ]

    def limits(self) -> dict[str, float | None]:
        return {
            "tokens": self.tokens,
            "cost": self.cost,
            "tool_calls": self.tool_calls,
            "wall_time": self.wall_time,
        }


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
    #: ``fn(ctx, result)`` undoes the step; run when the thread is cancelled (or fails, if
    #: the task says so), newest step first, at most once (through the effect ledger)
    compensate: Callable[..., Any] | None = None
    #: who is told when this step pauses (with the task's ``notify``; see Notify)
    notify: Notify | None = None

    @field_validator("notify", mode="before")
    @classmethod
    def _notify(cls, v: Any) -> Any:
        return as_notify(v)

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
        if self.notify is not None:
            out.extend(self.notify.problems(f"step {self.name!r}"))
        return out

    def spec(self) -> dict[str, Any]:
        """The parts of the step that make up the definition hash.

        Function bodies are deliberately left out: fixing a bug in a step and resuming the
        thread is the normal way to recover from a failure. Names, kinds, dependencies and
        policies are what a checkpoint depends on.
        """
        out = {
            "kind": self.kind,
            "name": self.name,
            "after": sorted(self.after),
            "retry": self.retry.model_dump() if self.retry else None,
            "timeout": self.timeout,
        }
        if self.compensate is not None:
            # Only when set, so that definitions from before compensations keep their hash.
            out["compensate"] = _qualname(self.compensate)
        return out


class FunctionStep(Step):
    """Deterministic Python code: ``fn(ctx) -> result``. ``fn`` may be a coroutine function."""

    kind: Literal["function"] = "function"
    fn: Callable[..., Any]
    #: a fix loop (``fix_with(agent)``) run when the step fails for good
    on_failure: Any = None

    def spec(self) -> dict[str, Any]:
        out = {**super().spec(), "fn": _qualname(self.fn)}
        if self.on_failure is not None and hasattr(self.on_failure, "spec"):
            out["on_failure"] = self.on_failure.spec()
        return out


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
    compensate: Callable[..., Any] | None = ...,
    on_failure: Any = ...,
    notify: Notify | str | Sequence[str] | None = ...,
) -> FunctionStep: ...


@overload
def function_step(
    fn: None = ...,
    *,
    name: str | None = ...,
    after: Sequence[str] | str = ...,
    retry: Retry | int | None = ...,
    timeout: float | timedelta | None = ...,
    compensate: Callable[..., Any] | None = ...,
    on_failure: Any = ...,
    notify: Notify | str | Sequence[str] | None = ...,
) -> Callable[[Callable[..., Any]], FunctionStep]: ...


def function_step(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    after: Sequence[str] | str = (),
    retry: Retry | int | None = None,
    timeout: float | timedelta | None = None,
    compensate: Callable[..., Any] | None = None,
    on_failure: Any = None,
    notify: Notify | str | Sequence[str] | None = None,
) -> FunctionStep | Callable[[Callable[..., Any]], FunctionStep]:
    """A step that runs ``fn(ctx)`` and stores what it returns as the step's result.

    Use it as a call, ``function_step(fetch, name="fetch", after=["plan"])``, or as a
    decorator, ``@function_step(after=["plan"])``. ``name`` defaults to the function's name.
    ``retry`` is a :class:`Retry` or a number of attempts (default: the task's ``retry``);
    ``timeout`` is in seconds. ``compensate(ctx, result)`` undoes the step when the thread
    is cancelled. ``on_failure=fix_with(agent_step(...), max_rounds=3)`` lets an agent fix
    the cause of a failure, then runs the step again. ``notify`` tells people when the
    step pauses (a budget or deadline reached, fix rounds used up; see Notify).
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
            compensate=compensate,
            on_failure=on_failure,
            notify=notify,  # type: ignore[arg-type]  # normalised by the validator
        )

    return build if fn is None else build(fn)


ItemErrorPolicy = Literal["fail", "skip", "collect"]


class MapStep(Step):
    """Runs ``fn(ctx, item)`` once per item of a list known only at run time.

    ``over(ctx)`` computes the items from the task inputs and dependency results. At most
    ``max_parallel`` items run at once, the next starting as soon as one finishes; each
    item's result is durable as soon as it finishes. The step's result is the list of item
    results in item order; with ``on_item_error="skip"`` failed items are left out, with
    ``"collect"`` the result is
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
    compensate: Callable[..., Any] | None = ...,
    notify: Notify | str | Sequence[str] | None = ...,
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
    compensate: Callable[..., Any] | None = ...,
    notify: Notify | str | Sequence[str] | None = ...,
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
    compensate: Callable[..., Any] | None = None,
    notify: Notify | str | Sequence[str] | None = None,
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
            compensate=compensate,
            notify=notify,  # type: ignore[arg-type]  # normalised by the validator
        )

    return build if fn is None else build(fn)


#: what happens when an approval is rejected or a pause times out: fail the task, count a
#: timeout as a rejection ("reject", approvals only), or skip ahead to the named later step
#: (the steps in between are marked skipped and that step runs with the outcome).
Outcome = str


class PauseStep(Step):
    """A step that waits for a person or an outside system (approval, wait_for)."""

    on_timeout: Outcome = "fail"

    def targets(self) -> dict[str, str]:
        """Policy name -> step name, for policies that name a step."""
        return {
            k: v
            for k, v in (("on_timeout", self.on_timeout),)
            if v not in ("fail", "reject", "skip")
        }

    def problems(self) -> list[str]:
        out = super().problems()
        if self.on_timeout == "reject" and self.kind != "approval":
            out.append(f"step {self.name!r}: on_timeout='reject' is only for approvals")
        if self.on_timeout == "skip" and self.kind == "approval":
            out.append(
                f"step {self.name!r}: an approval cannot be skipped on timeout; use "
                "on_timeout='reject', 'fail' or a later step"
            )
        return out


class ApprovalStep(PauseStep):
    """Pauses until a person approves ``plan(ctx)`` (or rejects it).

    ``timeout`` (seconds) is the deadline for an answer, counted from the request;
    ``valid_for`` (seconds) how long a decision stays good: an older one is not used and a
    fresh approval is requested instead.
    """

    kind: Literal["approval"] = "approval"
    plan: Callable[..., Any] | None = None
    approvers: tuple[str, ...] | None = None
    valid_for: float | None = None
    on_reject: Outcome = "fail"

    @field_validator("valid_for", mode="before")
    @classmethod
    def _valid_for_seconds(cls, v: Any) -> Any:
        return v.total_seconds() if isinstance(v, timedelta) else v

    def targets(self) -> dict[str, str]:
        out = super().targets()
        if self.on_reject != "fail":
            out["on_reject"] = self.on_reject
        return out

    def problems(self) -> list[str]:
        out = super().problems()
        if self.valid_for is not None and self.valid_for <= 0:
            out.append(f"step {self.name!r}: valid_for must be greater than 0")
        if self.approvers is not None and (
            not self.approvers or not all(isinstance(a, str) and a for a in self.approvers)
        ):
            out.append(f"step {self.name!r}: approvers must be a non-empty list of names")
        if self.on_reject == "reject":
            out.append(f"step {self.name!r}: on_reject must be 'fail' or a step name")
        return out

    def spec(self) -> dict[str, Any]:
        return {
            **super().spec(),
            "plan": _qualname(self.plan) if self.plan else None,
            "approvers": sorted(self.approvers) if self.approvers else None,
            "valid_for": self.valid_for,
            "on_reject": self.on_reject,
            "on_timeout": self.on_timeout,
        }


class WaitStep(PauseStep):
    """Pauses until an outside event named like the step arrives (``signal``); its payload,
    validated against ``schema`` when given, becomes the step's result."""

    kind: Literal["wait"] = "wait"
    schema_: Any = Field(default=None, alias="schema")

    model_config = ConfigDict(
        frozen=True, arbitrary_types_allowed=True, extra="forbid", populate_by_name=True
    )

    def spec(self) -> dict[str, Any]:
        schema = self.schema_
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            schema = schema.model_json_schema()
        return {**super().spec(), "schema": schema, "on_timeout": self.on_timeout}


def approval(
    name: str,
    *,
    plan: Callable[..., Any] | None = None,
    approvers: Sequence[str] | None = None,
    valid_for: float | timedelta | None = None,
    timeout: float | timedelta | None = None,
    on_reject: str = "fail",
    on_timeout: str = "fail",
    after: Sequence[str] | str = (),
    notify: Notify | str | Sequence[str] | None = None,
) -> ApprovalStep:
    """A human approval of ``plan(ctx)`` (the plan is computed from earlier results).

    A decision is bound to the plan's hash, may be limited to ``approvers``, must arrive
    before ``timeout`` seconds and is used only while younger than ``valid_for`` seconds.
    ``on_reject``: "fail" or a later step to skip ahead to; ``on_timeout``: "fail",
    "reject" or a later step. ``notify``: URLs (or a Notify) told when it waits.
    """
    return ApprovalStep(
        name=name,
        plan=plan,
        approvers=tuple(approvers) if approvers is not None else None,
        valid_for=valid_for,  # type: ignore[arg-type]  # normalised by the validator
        timeout=timeout,  # type: ignore[arg-type]  # normalised by the validator
        on_reject=on_reject,
        on_timeout=on_timeout,
        after=after,  # type: ignore[arg-type]  # normalised by the validator
        notify=notify,  # type: ignore[arg-type]  # normalised by the validator
    )


def wait_for(
    name: str,
    *,
    schema: Any = None,
    timeout: float | timedelta | None = None,
    on_timeout: str = "fail",
    after: Sequence[str] | str = (),
    notify: Notify | str | Sequence[str] | None = None,
) -> WaitStep:
    """Wait for the outside event ``name`` (``Runner.signal`` / ``longtask signal``).

    ``schema`` is a pydantic model or a JSON schema (dict) the payload must match.
    ``on_timeout``: "fail", "skip" (the result is None) or a later step to skip ahead to.
    ``notify``: URLs (or a Notify) told when it waits.
    """
    return WaitStep(
        name=name,
        schema=schema,
        timeout=timeout,  # type: ignore[arg-type]  # normalised by the validator
        on_timeout=on_timeout,
        after=after,  # type: ignore[arg-type]  # normalised by the validator
        notify=notify,  # type: ignore[arg-type]  # normalised by the validator
    )


class Stage(BaseModel):
    """A group of steps. Every step of a stage runs after every step of the previous stage."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    steps: tuple[Step, ...] = Field(default_factory=tuple)

    def __init__(self, name: str, steps: Sequence[Step] = (), **kw: Any) -> None:
        super().__init__(name=name, steps=tuple(steps), **kw)
