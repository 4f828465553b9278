"""``ctx.effect``: outside calls at most once per idempotency key.

The key is derived from the thread, the step (and map item), the effect's name and a hash
of the canonical encoding of its arguments (longtask.model._canonical: the same in every
process; an argument with no such encoding is refused) or the caller's own ``key=``, so a
step that runs again — after a crash, a retry or on a fork with the same arguments — finds
its earlier outcome instead of calling again:

- ``succeeded``: the recorded result is returned; the function is not called.
- ``failed``: the function is called again (the step's retry policy decided to retry).
- ``started`` with no outcome: the process died during the call and nobody knows whether it
  happened. ``reconcile(call)`` asks the outside system (a result if it happened, None if
  not), told what the outside system can know of the call (``EffectCall``: its name and
  arguments, the idempotency key it was offered, a tool call's id); without a reconciler
  the thread pauses for a person (``waiting_user``, "effect outcome unknown"), who settles
  it with ``longtask effects resolve``.

The function is offered the key: as ``idempotency_key=`` if it takes that parameter, and as
``idempotency_key()`` while it runs, for an API's ``Idempotency-Key`` header.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from langgraph.errors import GraphBubbleUp
from langgraph.types import interrupt

from longtask.errors import BadAnswer, InvalidInput, LongTaskError, OutcomeUnknown
from longtask.model import StepInfo
from longtask.model._canonical import NotCanonical, canonical_digest
from longtask.steps._effectanswer import EFFECT_ANSWER, effect_answer, inbox_view
from longtask.store._events import NewEvent
from longtask.store._values import to_json_bytes


class EffectFailed(LongTaskError):
    """A person resolved an effect whose outcome was unknown as failed."""

    #: the person's answer, not a passing fault: the retry policy does not call it again
    retryable = False


#: ledger error text of an effect a person resolved as failed, not yet reported to its step
RESOLVED_AS_FAILED = "resolved as failed"


@dataclasses.dataclass(frozen=True)
class EffectCall:
    """What a reconciler is told of a call that was cut off mid-way: what the outside system
    can know of it, to look it up there.

    ``name``: the effect's name (a tool's name for a tool call); ``args``/``kwargs``: the
    call's arguments (a tool's arguments as ``kwargs``); ``idempotency_key``: the key the
    call was offered (``idempotency_key=`` or ``longtask.idempotency_key()``), which an
    outside system that deduplicates by it knows; ``tool_call_id``: the model's id of a
    tool call (None for other effects), which a tool may have stored with its write;
    ``key``: the ledger's key of the effect, as ``longtask effects`` shows it (the same
    string as ``idempotency_key``)."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    idempotency_key: str
    tool_call_id: str | None = None

    @property
    def key(self) -> str:
        return self.idempotency_key


_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "longtask_idempotency_key", default=None
)


def idempotency_key() -> str | None:
    """The idempotency key of the effect (a ``ctx.effect`` call, a ``ledgered`` function, a
    graph's tool call) running now, None outside one: pass it to an outside API that
    deduplicates (an ``Idempotency-Key`` header), so a call run again after a crash with the
    same key is done once there, and so a reconciler can look it up
    (``EffectCall.idempotency_key``). The same on every run of the same call."""
    return _KEY.get()


@contextmanager
def offered(key: str) -> Iterator[None]:
    """``idempotency_key()`` is ``key`` inside."""
    token = _KEY.set(key)
    try:
        yield
    finally:
        _KEY.reset(token)


def effect_key(thread_id: str, step: str, name: str, args_hash: str, item: int | None) -> str:
    where = f"{step}[{item}]" if item is not None else step
    raw = f"{thread_id}\x1f{where}\x1f{name}\x1f{args_hash}"
    return "eff-" + hashlib.sha256(raw.encode()).hexdigest()[:32]


def args_digest(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any], key: str | None = None
) -> str:
    """What tells two calls of effect ``name`` in one step apart: the caller's ``key``, or a
    hash of the arguments' canonical encoding (stable across processes and hash seeds)."""
    if key is not None:
        if not isinstance(key, str) or not key:
            raise InvalidInput(f"the key= of effect {name!r} must be a non-empty string")
        # Prefixed: a caller's key never equals an argument hash (hex digits only).
        return "key:" + key
    try:
        return canonical_digest([list(args), kwargs], f"an argument of effect {name!r}")
    except NotCanonical as exc:
        raise NotCanonical(
            f'{exc}; the effect\'s key cannot be derived from it. Pass key="..." to '
            "ctx.effect (a string that names this call, stable across runs) or pass "
            "JSON-like arguments"
        ) from None


def _preview(value: Any, limit: int = 200) -> Any:
    """``value`` as JSON with long strings cut short (it is shown, not used)."""
    from pydantic_core import to_jsonable_python

    def cut(v: Any) -> Any:
        if isinstance(v, str):
            return v if len(v) <= limit else v[: limit - 1] + "…"
        if isinstance(v, dict):
            return {k: cut(x) for k, x in v.items()}
        if isinstance(v, list):
            return [cut(x) for x in v]
        return v

    return cut(to_jsonable_python(value, fallback=repr))


def result_schema(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """The JSON schema of ``fn``'s return annotation, if it has one pydantic understands."""
    try:
        from typing import get_type_hints

        from pydantic import TypeAdapter

        hint = get_type_hints(fn).get("return")
        if hint is None:
            return None
        schema: dict[str, Any] = TypeAdapter(hint).json_schema()
        return schema
    except Exception:  # an annotation pydantic cannot describe: show none
        return None


def _accepts_key(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.name == "idempotency_key" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params
    )


def _settle(env: Any, call: Any, info: StepInfo, key: str, name: str, answer: Any) -> bool:
    """Settle the ledger row of effect ``key`` with an answer given to its interrupt, in any
    shape it takes (steps._effectanswer); False if the answer is not one for it.
    ``{"resolved": ...}`` is the runtime's (``Runner.resolve_effect``, and every door's
    answer through it), which settled the row before resuming."""
    if isinstance(answer, dict) and "resolved" in answer:
        return bool(answer.get("key", key) == key)
    try:
        settled = effect_answer(f"the answer to effect {name!r}", key, answer)
    except BadAnswer:
        return False
    store = env.store
    row = store.effect(key)
    if row is None or row.status != "started":
        return True  # settled already (the same answer, seen by an earlier run of the node)
    outcome, by = settled.outcome, settled.by
    env.emit(
        call,
        "manual.resolve",
        f"manual.resolve/{key}",
        info,
        # No identity comes with a raw resume: ``by`` is what the answer says, if anything.
        data={"key": key, "outcome": outcome, "by": by, "via": "interrupt"},
    )
    if outcome == "succeeded":
        store.effect_finish(key, "succeeded", result=settled.result)
    elif outcome == "retry":
        store.effect_finish(key, "failed", error="retry")
    else:
        store.effect_finish(key, "failed", error=failed_error(by, settled.reason))
    return True


def failed_error(by: str | None, reason: str | None) -> str:
    """The ledger's error of an effect a person resolved as failed."""
    why = f": {reason}" if reason else ""
    return f"{RESOLVED_AS_FAILED} by {by or 'a person'}{why}"[:2000]


def run_effect(
    env: Any,
    call: Any,
    info: StepInfo,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    reconcile: Callable[[EffectCall], Any] | None,
    item: int | None = None,
    in_graph: bool = True,
    user_key: str | None = None,
    pause: Callable[[dict[str, Any]], Any] | None = None,
    tool_call_id: str | None = None,
    shown: Any = None,
) -> Any:
    """``fn(*args, **kwargs)`` at most once (see the module). ``tool_call_id``: the model's
    id of the tool call this is; ``shown``: what a person settling a cut-off call sees as
    its arguments (default: ``args`` and ``kwargs``)."""
    store = env.store
    digest = args_digest(name, args, kwargs, user_key)
    key = effect_key(call.thread_id, info.name, name, digest, item)
    data: dict[str, Any] = {"key": key, "name": name}
    if tool_call_id is not None:
        data["tool_call_id"] = tool_call_id

    def started(number: int) -> NewEvent:
        made: NewEvent = env.event(
            call, "effect.started", call.key("effect", key, number, "started"), info, data=data
        )
        return made

    # Each ledger write stores its event in its own transaction (a crash right after it
    # keeps the record); the thread's earlier events are stored first, in order.
    env.events.flush(call.thread_id)
    # An effect's first call, by far the most common, is started in one write; a key the
    # ledger knows is looked up first (done, cut off, settled, failed before).
    begun = store.effect_begin(key, call.thread_id, info.name, name, digest, started(1))
    number = 1 if begun else 0
    if not number:
        row = store.effect(key)
        if row is not None and row.status == "succeeded":
            return row.result
        if row is not None and row.status == "started":
            # The process died during the call: find out before acting again.
            if reconcile is not None:
                # a wrapper (``ledgered``'s) says which arguments its function was called with
                unpack = getattr(fn, "call_args", None)
                a, k = unpack(args, kwargs) if callable(unpack) else (tuple(args), dict(kwargs))
                found = reconcile(EffectCall(name, a, k, key, tool_call_id))
                if found is not None:
                    to_json_bytes(found, f"the reconciled result of effect {name!r}")
                    env.events.flush(call.thread_id)  # the thread's earlier events go first
                    store.effect_finish(
                        key,
                        "succeeded",
                        result=found,
                        event=env.event(
                            call,
                            "effect.succeeded",
                            call.key("effect", key, "reconciled"),
                            info,
                            data={**data, "reconciled": True},
                        ),
                    )
                    return found
                store.effect_forget(key, why="reconciled: it did not happen; called again")
            else:
                env.emit(call, "effect.unknown", f"effect.unknown/{key}", info, data=data)
                if not in_graph:
                    # A compensation runs outside the graph: nothing to interrupt, stop here.
                    raise OutcomeUnknown(
                        f"effect {name!r} ({key}) was cut off mid-call and has no reconciler; "
                        f"settle it with `longtask effects resolve {call.thread_id} {key} "
                        "--succeeded --result JSON` (or --failed, or --retry)"
                    )
                # Pauses the thread; `longtask effects resolve` settles the row, then resumes.
                request: dict[str, Any] = {
                    "kind": "effect",
                    "step": info.name,
                    "key": key,
                    "name": name,
                    "reason": "effect outcome unknown",
                    # what the person settling it needs: the call, and the result's shape
                    "args": _preview(
                        shown if shown is not None else [*args, kwargs] if kwargs else list(args)
                    ),
                    "result_schema": result_schema(fn),
                }
                if item is not None:
                    request["item"] = item
                if tool_call_id is not None:
                    request["tool_call_id"] = tool_call_id
                # Agent Inbox's view of the call beside longtask's (its answers are converted)
                request.update(inbox_view(request))
                if pause is not None:
                    pause(request)
                request["answer"] = EFFECT_ANSWER
                answer = interrupt(request)
                while not _settle(env, call, info, key, name, answer):
                    # Not an answer for this effect (one for an earlier pause of the node, or
                    # malformed): ask again.
                    answer = interrupt(request)
                row = store.effect(key)
                if row is not None and row.status == "succeeded":
                    return row.result
        if (
            row is not None
            and row.status == "failed"
            and (row.error or "").startswith(RESOLVED_AS_FAILED)
        ):
            # Reported once: the step fails now; a later resume may call the effect again.
            store.effect_finish(key, "failed", error=f"reported to the step: {row.error}")
            raise EffectFailed(f"effect {name!r} ({key}) was {row.error}")
        env.events.flush(call.thread_id)
        number = store.effect_start(key, call.thread_id, info.name, name, digest, event=started)
        if not number:
            row = store.effect(key)
            if row is not None and row.status == "succeeded":
                return row.result
            raise LongTaskError(f"effect {name!r} ({key}) is being performed by another process")
    try:
        extra = {"idempotency_key": key} if _accepts_key(fn) else {}
        with offered(key):
            result = fn(*args, **kwargs, **extra)
        to_json_bytes(result, f"the result of effect {name!r}")
    except GraphBubbleUp:
        # The call paused (an interrupt() inside it, or in a graph it ran): it runs again
        # from its start when answered, as LangGraph runs an interrupted node again.
        store.effect_forget(key, why="paused; called again when answered")
        raise
    except Exception as exc:
        env.events.flush(call.thread_id)
        store.effect_finish(
            key,
            "failed",
            error=f"{type(exc).__name__}: {exc}"[:2000],
            event=env.event(
                call,
                "effect.failed",
                call.key("effect", key, number, "failed"),
                info,
                data={**data, "error": f"{type(exc).__name__}: {exc}"[:500]},
            ),
        )
        raise
    env.events.flush(call.thread_id)
    store.effect_finish(
        key,
        "succeeded",
        result=result,
        event=env.event(
            call, "effect.succeeded", call.key("effect", key, number, "succeeded"), info, data=data
        ),
    )
    return result
