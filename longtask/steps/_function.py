"""The LangGraph node that runs a function step, and what every step kind shares: node
identity for idempotent events, attempts with retries, timeouts."""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp
from langgraph.types import Command
from pydantic import BaseModel

from longtask.errors import ResultNotAvailable, StepExited, StepTimeout
from longtask.model import FunctionStep, Retry, StepInfo
from longtask.model._decision import utcnow
from longtask.steps._attempts import (
    CONTROL,
    check_limits,
    describe,
    error_type,
    gate,
    gate_request,
    with_retries,
)
from longtask.steps._call import RUN_KEY, NodeCall
from longtask.steps._context import _CURRENT, StepContext, result_channel
from longtask.steps._loop import run_coroutine
from longtask.steps._siblings import Siblings, Snapshot
from longtask.steps._tracing import set_attributes, write_custom
from longtask.store import (
    NO_ITEM,
    Artifact,
    Attempts,
    EventWriter,
    NewEvent,
    Store,
    ValueCodec,
    attempt_statement,
    skipped_value,
)
from longtask.store._events import Charge

__all__ = [
    "CONTROL",
    "NodeCall",
    "StepEnv",
    "check_limits",
    "describe",
    "fix_loop_failure",
    "function_node",
    "with_retries",
]

#: attribute set on an exception raised by a step, naming the step (read by the Runner)
STEP_ATTR = "__longtask_step__"
#: seconds between two step.progress events of one step
PROGRESS_INTERVAL = 0.5


@dataclass
class StepEnv:
    """What every node of one compiled task shares."""

    store: Store
    codec: ValueCodec
    #: events are queued and written by a background thread (see EventWriter)
    events: EventWriter
    inputs_model: type[BaseModel] | None = None
    sleep: Callable[[float], None] = field(default=time.sleep)
    #: the time: injectable, so tests can jump past deadlines and validity windows
    clock: Callable[[], datetime] = field(default=utcnow)
    #: names of the task's approval and wait steps (a step checks them to see if it is
    #: skipped because one of them sent execution ahead)
    pauses: frozenset[str] = frozenset()
    #: the task's retry policy, for steps without their own
    default_retry: Retry | None = None
    #: whether the task has a budget or a deadline to check before each attempt
    has_limits: bool = False
    #: whether running time counts against the budget (``Budget.wall_time``)
    counts_time: bool = False
    on_limit: str = "pause"
    #: set when this process stops (a worker's SIGTERM): steps stop at their boundary
    stopping: threading.Event = field(default_factory=threading.Event)
    #: a worker schedules retry waits as jobs instead of sleeping
    defer_waits: bool = False
    #: the compiled graph's ``get_state``: a step about to raise reads its super-step's
    #: tasks with it, and waits until their results are saved (see longtask.steps._siblings)
    snapshot: Snapshot | None = None
    #: the steps of each thread's current super-step running in this process
    siblings: Siblings = field(default_factory=Siblings)
    #: the compiled graph's state channels, which a node reads when asked (see
    #: longtask.graphs._node.LazyState)
    channels: frozenset[str] = frozenset()
    #: ``adopt(thread_id, state)``: makes sure a thread run through the compiled graph
    #: directly (LangGraph's own ``invoke``/``stream``, no Runner) has its thread record
    adopt: Callable[[str, Mapping[str, Any]], None] | None = None
    _adopted: set[str] = field(default_factory=set)
    #: the run core's side of sub-task steps (``steps._subtask.ChildThreads``), set by the
    #: Engine: a sub-task node starts child threads through it
    children: Any = None
    #: once-per-thread event keys this process has queued (stage.started of each sibling)
    _emitted: dict[str, set[str]] = field(default_factory=dict)
    #: durable attempt counts, read once per thread per run (only failures write them)
    _attempts: dict[str, dict[tuple[str, int], Attempts]] = field(default_factory=dict)
    #: threads a cancel request was seen for (set by the Runner's watcher)
    _cancelled: set[str] = field(default_factory=set)
    #: each running thread's ancestors (its sub-task parents), set by the Runner per run
    _ancestors: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: when each step last reported progress (monotonic seconds), for the rate limit
    _progress_at: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def adopt_thread(self, config: RunnableConfig, state: Mapping[str, Any]) -> None:
        """Before a node of a run that no Runner started (no run number in its config)
        does anything: the thread gets its record, so status, events and the CLI see it
        and no row of it is an orphan. Once per thread and process."""
        conf = config.get("configurable") or {}
        thread_id = conf.get("thread_id")
        if RUN_KEY in conf or self.adopt is None or thread_id is None:
            return
        thread_id = str(thread_id)
        if thread_id in self._adopted:
            return
        self.adopt(thread_id, state)
        with self._lock:
            self._adopted.add(thread_id)

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
    ) -> None:
        """Queue an event about ``info``'s step (or just ``stage``): it commits with the
        thread's next checkpoint (a live one within a second), and pays ``charge`` in that
        transaction."""
        event = self.event(call, kind, key, info, stage=stage, attempt=attempt, data=data)
        if charge is not None:
            event = dataclasses.replace(event, charge=charge)
        self.events.put(event)
        # Also to LangGraph's `custom` stream mode, for a caller streaming the run.
        write_custom(
            {
                "longtask": kind,
                "thread_id": event.thread_id,
                "stage": event.stage,
                "step": event.step,
                "attempt": attempt,
                "data": data or {},
            }
        )

    def event(
        self,
        call: NodeCall,
        kind: str,
        key: str,
        info: StepInfo | None = None,
        *,
        stage: str | None = None,
        attempt: int | None = None,
        data: dict[str, Any] | None = None,
    ) -> NewEvent:
        """The event ``emit`` queues, for a write that stores it itself (the ledger's)."""
        return NewEvent(
            call.thread_id,
            kind,
            key,
            stage=info.stage if info else stage,
            step=info.name if info else None,
            attempt=attempt,
            data=data,
        )

    def context(
        self, call: NodeCall, info: StepInfo, state: Mapping[str, Any], attempt: int = 1
    ) -> StepContext:
        """The StepContext a step's function (or ``over``, or a plan) is called with."""
        return StepContext(
            thread_id=call.thread_id,
            info=info,
            attempt=attempt,
            state=state,
            codec=self.codec,
            inputs_model=self.inputs_model,
            effects=self.effects_for(call, info),
            runtime=self.runtime_for(call, info),
        )

    def effects_for(
        self,
        call: NodeCall,
        info: StepInfo,
        item: int | None = None,
        *,
        prefix: str = "",
        pause: Callable[[dict[str, Any]], Any] | None = None,
    ) -> Callable[..., Any]:
        """``ctx.effect`` of a step (of one map item); ``pause`` replaces LangGraph's
        ``interrupt`` when an effect's outcome is unknown (a map item's thread)."""
        from longtask.steps._effects import run_effect

        in_graph = not prefix

        def effect(
            name: str,
            fn: Any,
            args: Any,
            kwargs: Any,
            reconcile: Any,
            key: str | None = None,
            tool_call_id: str | None = None,
            shown: Any = None,
        ) -> Any:
            return run_effect(
                self,
                call,
                info,
                prefix + name,
                fn,
                args,
                kwargs,
                reconcile,
                item,
                in_graph,
                key,
                pause,
                tool_call_id,
                shown,
            )

        return effect

    def runtime_for(
        self, call: NodeCall, info: StepInfo, pause: Callable[[dict[str, Any]], Any] | None = None
    ) -> StepRuntime:
        return StepRuntime(self, call, info, pause)

    # -- attempts, budget, cancel ------------------------------------------------------------

    def attempts_of(self, thread_id: str, where: tuple[str, int]) -> Attempts | None:
        with self._lock:
            cached = self._attempts.get(thread_id)
        if cached is None:
            cached = self.store.attempts(thread_id)
            with self._lock:
                self._attempts[thread_id] = cached
        return cached.get(where)

    def record_attempt(
        self, thread_id: str, where: tuple[str, int], record: Attempts | None
    ) -> None:
        if record is None:
            self.store.attempts_clear(thread_id, *where)
        else:
            # With the thread's pending events (the attempt's step.retry, queued just
            # before): a crash never keeps the record without the event that tells of it.
            self.events.commit_with(
                thread_id, [attempt_statement(thread_id, where[0], where[1], record)]
            )
        with self._lock:
            cached = self._attempts.setdefault(thread_id, {})
            if record is None:
                cached.pop(where, None)
            else:
                cached[where] = record

    def artifact(
        self, call: NodeCall, info: StepInfo, name: str, data: bytes, media_type: str | None
    ) -> Artifact:
        """Store an artifact of ``info``'s step and record ``artifact.created``."""
        record = self.store.put_artifact(
            call.thread_id, name, data, step=info.name, media_type=media_type
        )
        self.emit(
            call,
            "artifact.created",
            call.key("artifact.created", name, record.digest[:16]),
            info,
            data={
                "name": name,
                "digest": record.digest,
                "size": record.size,
                "media_type": media_type,
            },
        )
        return record

    def progress(
        self, call: NodeCall, info: StepInfo, done: float, total: float | None, message: str | None
    ) -> None:
        """A ``step.progress`` event, at most one per step every PROGRESS_INTERVAL seconds
        (and always the last one, done == total), so a tight loop cannot flood the log."""
        now = time.monotonic()
        key = f"{call.thread_id}/{info.name}"
        with self._lock:
            last = self._progress_at.get(key)
            if last is not None and now - last < PROGRESS_INTERVAL and done != total:
                return
            self._progress_at[key] = now
        data: dict[str, Any] = {"done": done, "total": total}
        if message:
            data["message"] = message[:500]
        self.emit(call, "step.progress", call.key("step.progress", time.time_ns()), info, data=data)

    def charge_time(self, thread_id: str, seconds: float) -> None:
        if self.counts_time:
            self.store.charge(thread_id, ancestors=self.ancestors_of(thread_id), wall_time=seconds)

    def cancel(self, thread_id: str) -> None:
        with self._lock:
            self._cancelled.add(thread_id)

    def is_cancelled(self, thread_id: str) -> bool:
        return thread_id in self._cancelled

    def cancel_stored(self, thread_id: str) -> bool:
        """Whether a cancel is recorded for the thread, asking the store when this process
        has not heard of one: the run's watch polls only every ``cancel_poll`` seconds, and
        a step must not start after a cancel was acknowledged to whoever asked for it."""
        if self.is_cancelled(thread_id):
            return True
        if self.store.cancel_request(thread_id) is None:
            return False
        self.cancel(thread_id)
        return True

    def unstored(self, owner: str) -> dict[str, float]:
        return self.events.unstored(owner)

    def charge_for(
        self,
        call: NodeCall,
        info: StepInfo,
        tokens: int,
        cost: float,
        *,
        model_calls: int = 0,
        tool_calls: int = 0,
    ) -> Charge:
        """A charge to the step's usage and the budgets of its thread and its ancestors
        (known for the run: no query per call)."""
        owners = (call.thread_id, *self.ancestors_of(call.thread_id))
        return Charge(
            owners,
            info.name,
            tokens=tokens,
            cost=cost,
            model_calls=model_calls,
            tool_calls=tool_calls,
        )

    def set_ancestors(self, thread_id: str, ancestors: tuple[str, ...]) -> None:
        with self._lock:
            self._ancestors[thread_id] = ancestors

    def ancestors_of(self, thread_id: str) -> tuple[str, ...]:
        return self._ancestors.get(thread_id, ())

    def first_time(self, thread_id: str, key: str) -> bool:
        """True once per thread and key in this process (until ``forget``)."""
        with self._lock:
            seen = self._emitted.setdefault(thread_id, set())
            if key in seen:
                return False
            seen.add(key)
            return True

    def forget(self, thread_id: str) -> None:
        with self._lock:
            self._emitted.pop(thread_id, None)
            self._attempts.pop(thread_id, None)
            self._cancelled.discard(thread_id)
            self._ancestors.pop(thread_id, None)
        self.siblings.forget(thread_id)


@dataclass(frozen=True)
class StepRuntime:
    """What a StepContext may ask of the runtime: charge the budget, check the limits."""

    env: StepEnv
    call: NodeCall
    info: StepInfo
    #: raises a budget pause from another thread than the node's (a map item)
    pause: Callable[[dict[str, Any]], Any] | None = None

    def charge(self, tokens: int, cost: float, tool_calls: int) -> None:
        self.env.store.charge(
            self.call.thread_id,
            step=self.info.name,
            ancestors=self.env.ancestors_of(self.call.thread_id),
            tokens=tokens,
            cost=cost,
            tool_calls=tool_calls,
        )

    def check(self) -> None:
        check_limits(self.env, self.call, self.info, pause=self.pause)

    def cancelled(self) -> bool:
        return self.env.is_cancelled(self.call.thread_id)

    def progress(self, done: float, total: float | None, message: str | None) -> None:
        self.env.progress(self.call, self.info, done, total, message)

    def artifact(self, name: str, data: bytes, media_type: str | None) -> Artifact:
        return self.env.artifact(self.call, self.info, name, data, media_type)


def call_step(
    fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None, what: str
) -> Any:
    """``fn(*args)``, sync or async, failing with StepTimeout after ``timeout`` seconds.

    ``sys.exit()`` or another BaseException that is not an Exception fails the step
    (StepExited) instead of passing every handler and ending the process with the thread
    left running. KeyboardInterrupt is the person's Ctrl-C: it stops the run as it is.
    """
    try:
        return _call(fn, args, timeout, what)
    except (Exception, KeyboardInterrupt):
        raise
    except BaseException as exc:
        raise StepExited(exc, what) from exc


def _call(fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None, what: str) -> Any:
    if inspect.iscoroutinefunction(fn):
        # on the process's one loop (``steps._loop``): a client kept between calls (an
        # async HTTP client of a model) stays on the loop it was made on
        try:
            return run_coroutine(lambda: fn(*args), timeout)
        except TimeoutError as exc:
            raise StepTimeout(f"{what} did not finish within {timeout} s") from exc
    if timeout is None:
        return fn(*args)
    # A thread cannot be killed: on timeout the step is failed and its thread abandoned.
    # The copied context keeps LangGraph's config visible inside the function.
    box: dict[str, Any] = {}
    run_ctx = contextvars.copy_context()

    def target() -> None:
        try:
            box["value"] = run_ctx.run(fn, *args)
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"longtask-{what}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise StepTimeout(f"{what} did not finish within {timeout} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def step_failed(env: StepEnv, call: NodeCall, info: StepInfo, exc: Exception, **extra: Any) -> None:
    """Record ``step.failed`` and tag ``exc`` with the step so the Runner can name it."""
    attempt = getattr(exc, "__longtask_attempt__", 1)
    # Items of a map run in one node: the item tells their failures apart.
    where = (extra["item"], attempt) if "item" in extra else (attempt,)
    env.emit(
        call,
        "step.failed",
        call.key("step.failed", *where),
        info,
        attempt=attempt,
        data={"error": describe(exc), "type": error_type(exc), **extra},
    )
    setattr(exc, STEP_ATTR, info.name)
    if "item" in extra:
        exc.__longtask_item__ = extra["item"]  # type: ignore[attr-defined]


def step_started(
    env: StepEnv,
    call: NodeCall,
    info: StepInfo,
    attempt: int = 1,
    data: dict[str, Any] | None = None,
) -> None:
    """Record ``step.started`` with the number of the attempt about to run (a step run again
    after failed attempts, by a fix round or ``longtask retry``, goes on counting).

    Not once the thread is cancelled (asked of the store: this is the step boundary every
    kind of step passes): the attempt's own check (``check_limits``) stops the step before
    its code runs, and a step that never ran must not be recorded as started (nor given a
    usage row) after the cancel."""
    if env.cancel_stored(call.thread_id):
        return
    stage_key = f"stage.started/{info.stage}"
    if env.first_time(call.thread_id, stage_key):
        env.emit(call, "stage.started", stage_key, stage=info.stage)
    env.emit(call, "step.started", call.key("step.started"), info, attempt=attempt, data=data)
    set_attributes(attempt=attempt)


def step_completed(
    env: StepEnv,
    call: NodeCall,
    info: StepInfo,
    attempt: int,
    data: dict[str, Any],
    charge: Charge | None = None,
) -> None:
    """Record ``step.completed``; ``charge``: what the step used that no event of its own
    paid for yet, paid with it."""
    env.emit(
        call,
        "step.completed",
        call.key("step.completed"),
        info,
        attempt=attempt,
        data=data,
        charge=charge,
    )


def first_attempt(env: StepEnv, call: NodeCall, info: StepInfo) -> int:
    """The number of the next attempt of a step (its own attempts, not its model calls')."""
    prior = env.attempts_of(call.thread_id, (info.name, NO_ITEM))
    return (prior.failed if prior else 0) + 1


def attempt_done(env: StepEnv, call: NodeCall, info: StepInfo) -> None:
    """Forget a step's attempt count once an attempt of it succeeded, as ``with_retries``
    does for a function step's: a later run of the step (a fix round, ``longtask retry``)
    is numbered from 1 again. For the kinds whose attempts ``with_retries`` does not count
    (map and agent steps: their items and model calls are counted apart), only a recovery
    from a dead process moves this count on (see ``runtime/_recovery``)."""
    if env.attempts_of(call.thread_id, (info.name, NO_ITEM)) is not None:
        env.record_attempt(call.thread_id, (info.name, NO_ITEM), None)


def fix_round_of(state: Mapping[str, Any], step: str) -> dict[str, Any]:
    """``{"fix_round": n}`` while a step runs again after ``n`` fix rounds, else ``{}``."""
    done = int((state.get(f"fix.{step}") or {}).get("round", 0))
    return {"fix_round": done} if done else {}


def skipped_by(state: Mapping[str, Any], info: StepInfo, pauses: frozenset[str]) -> str | None:
    """Why this step is skipped: an earlier pause sent execution ahead to a later step
    that this one is not on the way to (and is not)."""
    for pause in sorted(info.ancestors & pauses):
        env = state.get(result_channel(pause))
        if isinstance(env, dict) and env.get("skip_to"):
            target = env["skip_to"]
            if target != info.name and target not in info.ancestors:
                return f"{pause} {env.get('reason', 'skipped ahead')} (skipping to {target!r})"
    return None


def unanswered(state: Mapping[str, Any], info: StepInfo, pauses: frozenset[str]) -> list[str]:
    """The approvals and waits before this step with no answer yet: only a goto that went
    past them (``resume --goto STEP --skip-pending``) runs a step before they end."""
    return sorted(p for p in info.ancestors & pauses if result_channel(p) not in state)


def waits_on_a_pause(
    env: StepEnv, thread_id: str, state: Mapping[str, Any], info: StepInfo, missing: Any
) -> bool:
    """Whether the result ``missing`` that this step read is not there because of a goto past
    a pause: it is that pause's answer, or the result of a step that waited for it (whose
    last word is a deferral, below), which runs again when the pause is answered."""
    if not isinstance(missing, str) or missing not in info.ancestors:
        return False
    if missing in unanswered(state, info, env.pauses):
        return True
    last = [
        e
        for e in env.store.events(thread_id, kinds=["step.completed", "step.skipped"])
        if e.step == missing
    ]
    return bool(last) and last[-1].kind == "step.skipped" and bool(last[-1].data.get("deferred"))


#: what a step's attempt returns when it read the result of a pause not answered yet
_DEFERRED = object()


def skip_update(env: StepEnv, call: NodeCall, info: StepInfo, reason: str) -> dict[str, Any]:
    env.emit(call, "step.skipped", call.key("step.skipped"), info, data={"reason": reason})
    return {result_channel(info.name): skipped_value(reason)}


def function_node(
    step: FunctionStep, info: StepInfo, env: StepEnv
) -> Callable[[dict[str, Any], RunnableConfig], Any]:
    """The node of a function step. With a fix loop (``on_failure``) it is the step's
    ``.run`` node: success goes on to the step's own node, a failure to the fix agent while
    rounds are left (see ``fix_loop_failure``)."""
    channel = result_channel(step.name)
    loop = step.on_failure

    # Only a step after an approval or wait can be skipped by one.
    after_pause = bool(env.pauses & info.ancestors)

    def node(state: dict[str, Any], config: RunnableConfig) -> Any:
        call = NodeCall.from_config(config)
        if after_pause:
            reason = skipped_by(state, info, env.pauses)
            if reason:
                update = skip_update(env, call, info, reason)
                return Command(update=update, goto=step.name) if loop else update
        rounds = fix_round_of(state, step.name) if loop is not None else {}
        step_started(env, call, info, first_attempt(env, call, info), rounds or None)
        started = time.monotonic()

        def attempt_fn(attempt: int) -> Any:
            ctx = env.context(call, info, state, attempt)
            token = _CURRENT.set(ctx)
            try:
                value = call_step(step.fn, (ctx,), step.timeout, f"step {step.name!r}")
            except ResultNotAvailable as exc:
                # Run early by a goto past a pause, it needs what the pause is waiting for
                # (issue 28, item 5): not a failure of the step. It stores no result and
                # runs again once the pause is answered, as its dependencies then say.
                missing = getattr(exc, "missing", None)
                if after_pause and waits_on_a_pause(env, call.thread_id, state, info, missing):
                    return _DEFERRED
                raise
            finally:
                _CURRENT.reset(token)
            return env.codec.encode(value, f"the result of step {step.name!r}")

        try:
            encoded, attempt = with_retries(env, call, info, step.retry, attempt_fn)
        except (GraphBubbleUp, *CONTROL):
            raise
        except Exception as exc:
            step_failed(env, call, info, exc)
            if loop is not None:
                return fix_loop_failure(env, call, info, state, loop, exc)
            raise
        if encoded is _DEFERRED:
            waiting = unanswered(state, info, env.pauses) or sorted(info.ancestors & env.pauses)
            reason = f"needs the answer to {', '.join(map(repr, waiting))}; runs once it is given"
            env.emit(
                call,
                "step.skipped",
                call.key("step.skipped", "deferred", attempt),
                info,
                data={"reason": reason, "deferred": True, "waiting_for": waiting},
            )
            return {}
        took = {"duration": round(time.monotonic() - started, 6), **rounds}
        step_completed(env, call, info, attempt, took)
        if loop is not None:
            return Command(update={channel: encoded}, goto=step.name)
        return {channel: encoded}

    node.__name__ = f"{step.name}.run" if loop else step.name
    return node


def fix_loop_failure(
    env: StepEnv, call: NodeCall, info: StepInfo, state: dict[str, Any], loop: Any, exc: Exception
) -> Command[Any]:
    """Send a failure to the fix agent, or end the loop when its rounds are used up."""
    channel = f"fix.{info.name}"
    current = dict(state.get(channel) or {})
    done = int(current.get("round", 0))
    failure = describe(exc)[:4000]
    if done >= loop.max_rounds:
        env.emit(
            call,
            "fix.exhausted",
            call.key("fix.exhausted", done),
            info,
            data={"rounds": done, "failure": failure},
        )
        if loop.on_exhausted == "ask":
            gate(
                gate_request(
                    "fix",
                    info,
                    f"still failing after {done} fix round{'' if done == 1 else 's'}: "
                    f"{failure[:300]}",
                    f"fix it by hand, then `longtask retry {call.thread_id}`",
                )
            )
        raise exc
    env.emit(
        call,
        "fix.round",
        call.key("fix.round", done + 1),
        info,
        data={
            "round": done + 1,
            "max_rounds": loop.max_rounds,
            "agent": loop.agent.name,
            "failure": failure,
        },
    )
    update = {channel: {"round": done + 1, "failure": failure}}
    return Command(update=update, goto=f"{info.name}.fix")
