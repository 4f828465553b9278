"""Attempts of a step: retries by error class, durable attempt counts, limits and cancel.

Every failed attempt is classified (see ``_classify``) and decided on:

- transient (and unclassified) errors are retried with the step's backoff;
- rate limits wait what the server asked (``Retry-After``), else back off;
- invalid input, an unknown outcome and errors marked ``retryable = False`` fail the step;
- a permission error pauses the thread for a person (``longtask retry`` tries again).

The count of failed attempts is written to ``longtask_attempts`` before the wait, so a
process that dies between two attempts does not give the step a fresh set of retries; the
next process continues with the next attempt number (and waits out what is left of the
back-off). A step that fails for good, or pauses, closes its retry window: resuming it
(``longtask retry``) grants ``max_attempts`` more attempts, numbered on.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from langgraph.errors import GraphBubbleUp

from longtask.errors import Cancelled, LimitReached, NeedsPerson, RetryLater, Stopping
from longtask.model import Retry, StepInfo
from longtask.steps._classify import Classified, classify
from longtask.store import NO_ITEM, Attempts

if TYPE_CHECKING:
    from longtask.steps._function import NodeCall, StepEnv

E = TypeVar("E", bound=BaseException)

#: control flow of the runtime, never an attempt's failure
CONTROL = (Cancelled, NeedsPerson, LimitReached, Stopping, RetryLater)


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


def permission_pause(exc: BaseException, call: NodeCall, info: StepInfo) -> NeedsPerson:
    """The pause for a person that a permission error of ``info``'s step turns into."""
    return _tagged(
        NeedsPerson(
            "permission",
            f"permission denied: {describe(exc)[:500]}",
            f"fix the access, then `longtask retry {call.thread_id}`",
        ),
        info,
    )


def check_limits(env: StepEnv, call: NodeCall, info: StepInfo) -> None:
    """Before an attempt starts: stop if the thread was cancelled, or its budget or
    deadline is used up (pause or fail, per the task's ``on_limit``)."""
    if env.is_cancelled(call.thread_id):
        raise _tagged(Cancelled(f"thread {call.thread_id!r} was cancelled"), info)
    if env.stopping.is_set():
        raise _tagged(Stopping("the worker is shutting down"), info)
    if not env.has_limits:
        return
    budget = env.store.budget(call.thread_id)
    if budget is None:
        return
    exceeded = budget.exceeded(env.clock().timestamp())
    if not exceeded:
        return
    kind = "deadline" if exceeded == ["deadline passed"] else "budget"
    reason = f"{kind} exceeded: {', '.join(exceeded)}"
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
    raise _tagged(
        NeedsPerson(
            kind,
            reason,
            f"`longtask budget {thread} --add-tokens N` (or --add-cost, --add-tool-calls, "
            f"--add-time, --extend-deadline), then `longtask resume {thread}`",
        ),
        info,
    )


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
    env: StepEnv,
    call: NodeCall,
    info: StepInfo,
    retry: Retry | None,
    attempt_fn: Callable[[int], Any],
    *,
    item: int | None = None,
    extra: dict[str, Any] | None = None,
) -> tuple[Any, int]:
    """Run ``attempt_fn(attempt)`` until it returns or the retry policy gives up.

    Returns the value and the attempt number that produced it. A failure that ends the step
    is re-raised with ``__longtask_attempt__`` and ``__longtask_error_class__`` set; a
    permission error becomes :class:`NeedsPerson`. LangGraph's control-flow exceptions and
    the runtime's own (cancel, limits) pass straight through.
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
        check_limits(env, call, info)
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
            env.record_attempt(call.thread_id, where, record)
            env.charge_time(call.thread_id, time.monotonic() - started)
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
            if outcome == "retry":
                if wait > 0:
                    # The record of this attempt is stored before the wait: a process that
                    # dies while waiting keeps it (the event writer is otherwise lazy).
                    env.events.flush()
                if env.defer_waits and wait > 0:
                    # On a worker the wait is a scheduled job: no process sleeps through it.
                    raise _tagged(RetryLater(record.retry_at or 0.0), info) from exc
                env.sleep(wait)
                continue
            exc.__longtask_attempt__ = attempt  # type: ignore[attr-defined]
            exc.__longtask_error_class__ = verdict.error_class  # type: ignore[attr-defined]
            if outcome == "paused":
                paused = permission_pause(exc, call, info)
                paused.__longtask_attempt__ = attempt  # type: ignore[attr-defined]
                raise paused from exc
            raise
        env.charge_time(call.thread_id, time.monotonic() - started)
        if failed:
            env.record_attempt(call.thread_id, where, None)
        return value, attempt
