"""Attempts of a step: retries by error class, durable attempt counts, limits and cancel.

Every failed attempt is classified (see ``_classify``) and decided on:

- transient (and unclassified) errors are retried with the step's backoff;
- rate limits wait what the server asked (``Retry-After``), else back off;
- invalid input, an unknown outcome and errors marked ``retryable = False`` fail the step;
- a permission error pauses the thread for a person (``longtask retry`` tries again).

Every such pause, and a budget or deadline reached with ``on_limit="pause"``, is LangGraph's
``interrupt()`` called from the node (a *gate*), so LangGraph's own API sees it as an
interrupt and ``Command(resume=...)`` answers it. A gate's answer means "look again": the node
runs again from its first line, checks the budget again and makes a fresh attempt, and pauses
again (a new interrupt) if it is still blocked. So nothing that runs before a gate in a node
may be unsafe to repeat; a failed attempt and a reached limit both are (the attempt count is
durable, and the budget only grows).

The count of failed attempts is written to ``longtask_attempts`` before the wait, so a
process that dies between two attempts does not give the step a fresh set of retries; the
next process continues with the next attempt number (and waits out what is left of the
back-off). A step that fails for good, or pauses, closes its retry window: resuming it
(``longtask retry``) grants ``max_attempts`` more attempts, numbered on.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from langgraph.errors import GraphBubbleUp
from langgraph.types import interrupt

from longtask.errors import Cancelled, LimitReached, NeedsPerson, RetryLater, Stopping
from longtask.model import Retry, StepInfo
from longtask.steps._classify import Classified, classify
from longtask.store import NO_ITEM, Attempts, Store
from longtask.store._events import Charge

if TYPE_CHECKING:
    from longtask.steps._call import NodeCall

E = TypeVar("E", bound=BaseException)

#: control flow of the runtime, never an attempt's failure
CONTROL = (Cancelled, NeedsPerson, LimitReached, Stopping, RetryLater)


#: what a gate's interrupt value says it expects as its answer
_ANSWERS = {
    "budget": 'any value, e.g. {"continue": true}, once the limit is raised: the step checks '
    "the budget again and pauses again if it is still over",
    "permission": 'any value, e.g. {"retry": true}, once the access is fixed: the step is '
    "tried again with a fresh set of attempts",
    "fix": 'any value, e.g. {"retry": true}, once the cause is fixed: the step is tried again',
}
_ANSWERS["deadline"] = _ANSWERS["budget"]

#: replaces ``interrupt`` where the pause must be raised by another thread (a map item)
Pause = Callable[[dict[str, Any]], Any]


class AttemptEnv(Protocol):
    """What attempts read and record through the nodes' shared env (``StepEnv``, which is
    built on this module: a protocol, so this module need not import it back)."""

    @property
    def store(self) -> Store: ...
    @property
    def sleep(self) -> Callable[[float], None]: ...
    @property
    def clock(self) -> Callable[[], datetime]: ...
    @property
    def default_retry(self) -> Retry | None: ...
    @property
    def has_limits(self) -> bool: ...

    def ancestors_of(self, thread_id: str) -> tuple[str, ...]: ...
    @property
    def on_limit(self) -> str: ...
    @property
    def stopping(self) -> threading.Event: ...
    @property
    def defer_waits(self) -> bool: ...

    def emit(
        self,
        call: NodeCall,
        kind: str,
        key: str,
        info: StepInfo | None = None,
        *,
        stage: str | None = None,
        attempt: int | None = None,
        data: dict[str, Any] | None = None,
        charge: Charge | None = None,
    ) -> None: ...

    def unstored(self, owner: str) -> dict[str, float]: ...

    def attempts_of(self, thread_id: str, where: tuple[str, int]) -> Attempts | None: ...

    def record_attempt(
        self, thread_id: str, where: tuple[str, int], record: Attempts | None
    ) -> None: ...

    def charge_time(self, thread_id: str, seconds: float) -> None: ...

    def is_cancelled(self, thread_id: str) -> bool: ...


def gate_request(
    kind: str, info: StepInfo, reason: str, command: str, **extra: Any
) -> dict[str, Any]:
    """The JSON interrupt value of a gate: its kind, step, reason, the command that answers it
    from the CLI and what answer it expects through LangGraph."""
    request: dict[str, Any] = {
        "kind": kind,
        "step": info.name,
        "reason": reason,
        "command": command,
        "answer": _ANSWERS[kind],
    }
    request.update({k: v for k, v in extra.items() if v is not None})
    return request


def gate(request: dict[str, Any], pause: Pause | None = None) -> NoReturn:
    """Pause the thread at a gate with LangGraph's ``interrupt()``; never returns.

    A resume value LangGraph hands back here was given before this run of the node, which
    has since looked again (checked the budget, made fresh attempts) and is still blocked:
    pass such values by until this pause is raised as a new interrupt."""
    if pause is not None:
        pause(request)
    while True:
        interrupt(request)


def error_type(exc: BaseException) -> str:
    """The type name an error is recorded and shown with (a StepExited shows the type the
    step raised, e.g. SystemExit)."""
    return str(getattr(exc, "__longtask_type__", None) or type(exc).__name__)


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{error_type(exc)}: {text}" if text else error_type(exc)


def _tagged(exc: E, info: StepInfo) -> E:
    exc.__longtask_step__ = info.name  # type: ignore[attr-defined]  # read by the Runner
    return exc


def permission_request(
    exc: BaseException, call: NodeCall, info: StepInfo, item: int | None = None, **extra: Any
) -> dict[str, Any]:
    """The gate's request that a permission error of ``info``'s step turns into."""
    return gate_request(
        "permission",
        info,
        f"permission denied: {describe(exc)[:500]}",
        f"fix the access, then `longtask retry {call.thread_id}`",
        item=item if item is not None and item >= 0 else None,
        **extra,
    )


def check_limits(
    env: AttemptEnv,
    call: NodeCall,
    info: StepInfo,
    *,
    pause: Pause | None = None,
    item: int | None = None,
) -> None:
    """Before an attempt starts: stop if the thread was cancelled, or its budget or
    deadline is used up (pause at a gate or fail, per the task's ``on_limit``)."""
    if env.is_cancelled(call.thread_id):
        raise _tagged(Cancelled(f"thread {call.thread_id!r} was cancelled"), info)
    if env.stopping.is_set():
        raise _tagged(Stopping("the worker is shutting down"), info)
    # A sub-task is bound by its ancestors' budgets and deadlines too.
    ancestors = env.ancestors_of(call.thread_id)
    if not env.has_limits and not ancestors:
        return
    now = env.clock().timestamp()
    for owner in (call.thread_id, *ancestors):
        budget = env.store.budget(owner)
        if budget is not None:
            # Charges ride with their events (a model call's with its ``model.call``): what
            # the queued ones charge is not in the stored counters yet.
            budget = budget.plus(env.unstored(owner))
        exceeded = budget.exceeded(now) if budget is not None else []
        if budget is not None and exceeded:
            break
    else:
        return
    kind = "deadline" if exceeded == ["deadline passed"] else "budget"
    whose = "" if owner == call.thread_id else f" of ancestor {owner}"
    reason = f"{kind}{whose} exceeded: {', '.join(exceeded)}"
    env.emit(
        call,
        "budget.exceeded",
        call.key("budget.exceeded"),
        info,
        data={"reason": reason, "limits": budget.limits, "used": budget.used},
    )
    if env.on_limit == "fail":
        raise _tagged(LimitReached(f"{reason} (the task's on_limit is 'fail')"), info)
    thread = call.thread_id
    request = gate_request(
        kind,
        info,
        reason,
        f"`longtask budget {owner} --add-tokens N` (or --add-cost, --add-tool-calls, "
        f"--add-time, --extend-deadline), then `longtask resume {thread}`",
        limits=budget.limits,
        used=budget.used,
        item=item if item is not None and item >= 0 else None,
    )
    gate(request, pause)


def _wait_for(retry: Retry, verdict: Classified, window_attempt: int) -> float:
    if verdict.error_class == "rate_limited" and verdict.retry_after is not None:
        # The server said how long; jitter or a cap would only earn another 429.
        return max(0.0, verdict.retry_after)
    wait = retry.wait_before(window_attempt + 1)
    if retry.jitter:
        wait += random.uniform(0, wait * 0.1)
    return wait


def _verdict(exc: Exception, verdict: Classified, retry: Retry | None, in_window: int) -> str:
    if verdict.error_class == "permission":
        return "paused"
    if (
        verdict.error_class in ("invalid_input", "outcome_unknown")
        or not getattr(exc, "retryable", True)
        or retry is None
        or in_window >= retry.max_attempts
    ):
        return "failed"
    return "retry"


def with_retries(
    env: AttemptEnv,
    call: NodeCall,
    info: StepInfo,
    retry: Retry | None,
    attempt_fn: Callable[[int], Any],
    *,
    item: int | None = None,
    extra: dict[str, Any] | None = None,
    pause: Pause | None = None,
) -> tuple[Any, int]:
    """Run ``attempt_fn(attempt)`` until it returns or the retry policy gives up.

    Returns the value and the attempt number that produced it. A failure that ends the step
    is re-raised with ``__longtask_attempt__`` and ``__longtask_error_class__`` set; a
    permission error pauses at a gate (``pause``, else ``interrupt()``). LangGraph's
    control-flow exceptions and the runtime's own (cancel, limits) pass straight through.
    """
    retry = retry or env.default_retry
    where = (info.name, NO_ITEM if item is None else item)
    prior = env.attempts_of(call.thread_id, where)
    failed = prior.failed if prior else 0
    window = prior.window_start if prior else 0
    if prior is not None and prior.retry_at is not None:
        # An earlier process died while waiting to retry: wait out the rest.
        left = prior.retry_at - env.clock().timestamp()
        if left > 0:
            env.sleep(left)
    while True:
        attempt = failed + 1
        check_limits(env, call, info, pause=pause, item=item)
        started = time.monotonic()
        try:
            value = attempt_fn(attempt)
        except (GraphBubbleUp, *CONTROL):
            raise
        except Exception as exc:
            verdict = classify(exc, env.clock())
            outcome = _verdict(exc, verdict, retry, attempt - window)
            wait = (
                _wait_for(retry, verdict, attempt - window) if retry and outcome == "retry" else 0.0
            )
            failed = attempt
            if outcome != "retry":
                window = failed
            record = Attempts(
                failed, window, env.clock().timestamp() + wait if outcome == "retry" else None
            )
            data: dict[str, Any] = {
                "error": describe(exc)[:2000],
                "error_class": verdict.error_class,
                "outcome": outcome,
                "wait": round(wait, 3),
            }
            if verdict.status_code is not None:
                data["status_code"] = verdict.status_code
            if outcome == "retry":
                data["next_attempt"] = attempt + 1
            if item is not None and item >= 0:
                data["item"] = item
            data.update(extra or {})
            env.emit(
                call,
                "step.retry",
                call.key("step.retry", item, attempt),
                info,
                attempt=attempt,
                data=data,
            )
            # The record of this attempt, in one transaction with its step.retry (queued
            # above): stored before the wait, so a process that dies while waiting keeps
            # both, and never one without the other.
            env.record_attempt(call.thread_id, where, record)
            env.charge_time(call.thread_id, time.monotonic() - started)
            if outcome == "retry":
                if env.defer_waits and wait > 0:
                    # On a worker the wait is a scheduled job: no process sleeps through it.
                    raise _tagged(RetryLater(record.retry_at or 0.0), info) from exc
                env.sleep(wait)
                continue
            exc.__longtask_attempt__ = attempt  # type: ignore[attr-defined]
            exc.__longtask_error_class__ = verdict.error_class  # type: ignore[attr-defined]
            if outcome == "paused":
                # The retry window is closed (above): the attempts after the answer are fresh.
                gate(permission_request(exc, call, info, item, attempt=attempt), pause)
            raise
        env.charge_time(call.thread_id, time.monotonic() - started)
        if failed:
            env.record_attempt(call.thread_id, where, None)
        return value, attempt
