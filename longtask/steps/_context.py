"""StepContext: what a step function sees of its task."""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import BaseModel, TypeAdapter

from longtask.errors import ResultNotAvailable
from longtask.model import StepInfo
from longtask.store import ValueCodec
from longtask.store._values import is_reference

if TYPE_CHECKING:
    from longtask.steps._effects import EffectCall

T = TypeVar("T")

INPUTS_CHANNEL = "lt.inputs"
#: the run context (LangGraph's runtime context for graph steps' graphs), in the state of a
#: task with a graph step: written with the inputs at the start and with each new input
CONTEXT_CHANNEL = "lt.context"

#: the context of the step running in this thread (tools of an agent step read it)
_CURRENT: contextvars.ContextVar[StepContext | None] = contextvars.ContextVar(
    "longtask_step", default=None
)


def current_context() -> StepContext:
    """The StepContext of the step running now: for code a step calls that does not get
    ``ctx`` passed, such as an agent's tools (``current_context().inputs``)."""
    ctx = _CURRENT.get()
    if ctx is None:
        raise ResultNotAvailable("current_context() is available only while a step runs")
    return ctx


def result_channel(step: str) -> str:
    """The state channel holding ``step``'s result. Step names never contain dots, so this
    cannot collide with a node name or with another step's channel."""
    return f"out.{step}"


class _Results(Mapping[str, Any]):
    """Lazy, read-only view of the results a step may read (its ancestors)."""

    def __init__(self, ctx: StepContext) -> None:
        self._ctx = ctx

    def __getitem__(self, name: str) -> Any:
        return self._ctx.result(name)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._ctx.info.ancestors))

    def __len__(self) -> int:
        return len(self._ctx.info.ancestors)


class StepContext:
    """Handed to every step function as its only argument.

    ``inputs`` are the task's inputs (an instance of the task's ``inputs`` model if it has
    one), ``result(name)`` the result of a step this one depends on, directly or through
    earlier stages.
    """

    def __init__(
        self,
        *,
        thread_id: str,
        info: StepInfo,
        attempt: int,
        state: Mapping[str, Any],
        codec: ValueCodec,
        inputs_model: type[BaseModel] | None,
        effects: Callable[..., Any] | None = None,
        runtime: Any = None,
    ) -> None:
        self._effects = effects
        #: the runtime's hooks (StepRuntime): budget charges, limit checks, cancel
        self._runtime = runtime
        self.thread_id = thread_id
        self.info = info
        self.attempt = attempt
        self._state = state
        self._codec = codec
        self._inputs_model = inputs_model
        self._inputs: Any = None
        self._decoded: dict[str, Any] = {}

    @property
    def step(self) -> str:
        return self.info.name

    @property
    def stage(self) -> str:
        return self.info.stage

    @property
    def run_context(self) -> dict[str, Any]:
        """The context the thread was started with (or its latest new input brought): a
        Server API run's ``context``, ``Runner.start(..., context=...)``; ``{}`` if none.
        Only a task with a graph step keeps one."""
        value = self._state.get(CONTEXT_CHANNEL)
        return dict(value) if isinstance(value, Mapping) else {}

    @property
    def inputs(self) -> Any:
        if self._inputs is None:
            env = self._state.get(INPUTS_CHANNEL)
            if (
                self._inputs_model is not None
                and isinstance(env, dict)
                and is_reference(env)
                and "model" in env
            ):
                # Stored as a model before 0.2: the task's own model rebuilds them, no need
                # to import the stored class.
                env = {k: v for k, v in env.items() if k != "model"}
            raw = self._codec.decode(env) or {}
            self._inputs = self._inputs_model.model_validate(raw) if self._inputs_model else raw
        return self._inputs

    @property
    def results(self) -> Mapping[str, Any]:
        return _Results(self)

    @overload
    def result(self, name: str) -> Any: ...
    @overload
    def result(self, name: str, type: type[T]) -> T: ...

    def result(self, name: str, type: Any = None) -> Any:
        """The result of step ``name``; with ``type``, validated into it (a pydantic model,
        ``int``, ``list[str]``...)."""
        if name not in self.info.ancestors:
            deps = ", ".join(sorted(self.info.ancestors)) or "none"
            raise ResultNotAvailable(
                f"step {self.step!r} cannot read the result of {name!r}: it is not one of its "
                f"dependencies (available: {deps}). Add it to after=[...] or move the step "
                "to a later stage."
            )
        channel = result_channel(name)
        if channel not in self._state:
            missing = ResultNotAvailable(f"step {name!r} has no stored result")
            missing.missing = name  # type: ignore[attr-defined]
            raise missing
        if type is not None:
            # With a target type the stored class need not be importable here.
            value = self._codec.decode(self._state[channel], strict=False)
        else:
            if name not in self._decoded:
                self._decoded[name] = self._codec.decode(self._state[channel])
            value = self._decoded[name]
        if type is None:
            return value
        if isinstance(value, BaseModel) and isinstance(value, type):
            return value
        return TypeAdapter(type).validate_python(
            value.model_dump() if isinstance(value, BaseModel) else value
        )

    def effect(
        self,
        name: str,
        fn: Callable[..., T],
        *args: Any,
        reconcile: Callable[[EffectCall], Any] | None = None,
        key: str | None = None,
        **kwargs: Any,
    ) -> T:
        """Perform an outside effect at most once: ``fn(*args, **kwargs)``.

        The idempotency key comes from the thread, this step (and map item), ``name`` and
        the arguments, hashed from a canonical encoding that is the same in every process:
        dict keys sorted, sets sorted, pydantic models and dataclasses dumped, tuples as
        lists, and ``datetime``/``date``/``time``/``Decimal``/``UUID``/``bytes``/``Enum``/
        ``Path`` each in a fixed tagged form. An argument with no such encoding (a plain
        object, whose text holds its address) is refused with ``InvalidInput``: pass
        ``key="..."``, a string naming this call (an order id, say), and it replaces the
        arguments in the key (so ``key`` and ``reconcile`` are not passed on to ``fn``).
        ``fn`` gets the idempotency key as ``idempotency_key=`` if it takes that parameter (or
        ``**kwargs``) and as :func:`longtask.idempotency_key` while it runs, so the outside
        system can deduplicate too. On a re-run a succeeded effect returns its recorded result
        without calling ``fn``. If an earlier call died mid-way, ``reconcile(call)`` is asked
        what happened, told the call's name, arguments and idempotency key
        (:class:`longtask.EffectCall`): a result, or None if nothing did (``fn`` is called
        again); without a reconciler the thread pauses until a person settles it with
        ``longtask effects resolve``. Results must be JSON values.
        """
        if self._effects is None:
            raise ResultNotAvailable("ctx.effect is available only while a step runs")
        return self._effects(name, fn, args, kwargs, reconcile, key)  # type: ignore[no-any-return]

    def charge(self, *, tokens: int = 0, cost: float = 0.0, tool_calls: int = 0) -> None:
        """Add to the thread's budget counters (LLM tokens, cost, tool calls). Charges are
        durable at once; the limits are checked before the next step or model call."""
        if min(tokens, cost, tool_calls) < 0:
            raise ValueError("charges must not be negative")
        if self._runtime is None:
            raise ResultNotAvailable("ctx.charge is available only while a step runs")
        self._runtime.charge(int(tokens), float(cost), int(tool_calls))

    def check_budget(self) -> None:
        """Stop here if the thread's budget or deadline is used up or it was cancelled (as
        before every step): call it before an expensive call such as a model request."""
        if self._runtime is not None:
            self._runtime.check()

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Report how far the step is (``done`` of ``total``, a message): a
        ``step.progress`` event that ``watch`` and the web page show. Rate-limited to one
        every half second per step (the last one, done == total, always goes out)."""
        if self._runtime is None:
            raise ResultNotAvailable("ctx.progress is available only while a step runs")
        self._runtime.progress(done, total, message)

    def artifact(
        self,
        name: str,
        data: bytes | str | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
        media_type: str | None = None,
    ) -> dict[str, Any]:
        """Store an output too large or too binary for a result (a report, a patch, a
        transcript): ``data`` (bytes, or text stored as UTF-8) or the file at ``path``.
        Content-addressed, kept out of checkpoints; ``artifact.created`` is recorded. Returns
        a small reference (name, digest, size, media type) to put in the step's result."""
        if (data is None) == (path is None):
            raise ValueError("ctx.artifact needs exactly one of data= or path=")
        if self._runtime is None:
            raise ResultNotAvailable("ctx.artifact is available only while a step runs")
        if path is not None:
            content = Path(path).read_bytes()
        elif isinstance(data, str):
            content = data.encode()
            media_type = media_type or "text/plain; charset=utf-8"
        else:
            content = bytes(data)  # type: ignore[arg-type]
        record = self._runtime.artifact(name, content, media_type)
        return {
            "artifact": record.name,
            "digest": record.digest,
            "size": record.size,
            "media_type": record.media_type,
        }

    @property
    def cancel_requested(self) -> bool:
        """True once someone asked to cancel the thread: a long step may stop early (the
        run stops at the next step boundary either way)."""
        return bool(self._runtime is not None and self._runtime.cancelled())

    def __repr__(self) -> str:
        return (
            f"StepContext(thread_id={self.thread_id!r}, step={self.step!r}, "
            f"stage={self.stage!r}, attempt={self.attempt})"
        )


class ItemContext(StepContext):
    """The context of one item of a map step: ``item`` and ``item_index`` besides the rest."""

    def __init__(self, *, item: Any, item_index: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.item = item
        self.item_index = item_index

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, item_index={self.item_index})"
