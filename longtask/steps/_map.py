"""Map steps: one LangGraph node that runs the items itself, ``max_parallel`` at a time.

The node (named after the step, so dependents' edges start from it as from any step):

- computes the items with ``over(ctx)`` on the first entry and stores them with the map run
  in ``longtask_maps``; a later entry (a resume after a crash, a pause or a failed item)
  reads them back instead of calling ``over`` again;
- runs every item that has no outcome yet (and, with ``on_item_error="fail"``, every failed
  one) on ``max_parallel`` worker threads: a sliding window, where the next item starts as
  soon as any item finishes. The node is one task of its LangGraph super-step, so a slow
  step beside it never holds back its items (LangGraph's own ``Send`` waves would wait for
  the whole super-step);
- records each item's outcome in ``longtask_map_items`` the moment it finishes, once;
- returns a reference to those rows as the step's result (``map_envelope``): the checkpoint
  never copies item results, and ``ValueCodec.decode`` assembles the list when it is read.

Each worker thread runs in a copy of the node's context, so LangGraph's config is visible
in the item. Pauses are LangGraph's, and LangGraph keys a node's resume values by the order
of its ``interrupt()`` calls: items running side by side would call it in any order. So an
item's pause (an effect whose outcome is unknown, a budget reached, a permission missing) is
raised in the item as ``ItemPause`` and the node's own thread calls ``interrupt()`` once the
in-flight items have finished.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp
from langgraph.types import interrupt
from pydantic_core import to_jsonable_python

from longtask.errors import InvalidInput
from longtask.model import MapStep, StepInfo
from longtask.steps._context import INPUTS_CHANNEL, ItemContext, result_channel
from longtask.steps._function import (
    CONTROL,
    PROGRESS_INTERVAL,
    NodeCall,
    StepEnv,
    attempt_done,
    call_step,
    check_limits,
    describe,
    first_attempt,
    skip_update,
    skipped_by,
    step_completed,
    step_failed,
    step_started,
    with_retries,
)
from longtask.store._values import map_envelope, to_json_bytes

Node = Callable[[dict[str, Any], RunnableConfig], Any]

#: failed items named in a step.progress event
FAILED_SHOWN = 5


class ItemPause(GraphBubbleUp):
    """An item needs a person (an effect whose outcome is unknown): raised in the item's
    thread, turned into LangGraph's ``interrupt()`` by the map node's own thread."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__(payload)
        self.payload = payload


def _item_pause(payload: dict[str, Any]) -> NoReturn:
    raise ItemPause(payload)


def _digest(state: dict[str, Any], info: StepInfo) -> str:
    """Identity of one map run: its inputs. A fork that changes them starts a new map."""
    basis = {
        "inputs": state.get(INPUTS_CHANNEL),
        "deps": {a: state.get(result_channel(a)) for a in sorted(info.ancestors)},
    }
    return hashlib.sha256(json.dumps(basis, sort_keys=True, default=str).encode()).hexdigest()[:32]


@dataclass
class _Window:
    """Runs items on ``width`` threads, the next item as soon as one finishes; keeps the
    counts for progress events in memory (constant work per item)."""

    env: StepEnv
    call: NodeCall
    info: StepInfo
    digest: str
    total: int
    done: int
    failed: int
    #: the first failed items, by index (for progress events)
    failed_items: list[dict[str, Any]]
    every: int
    stop: bool = False
    #: the first item failure or control exception: ends the map once in-flight items end
    error: BaseException | None = None
    pauses: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    _since: int = 0
    _last: float = 0.0
    #: done + failed in the last progress event
    _reported: int = -1
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, todo: list[int], fn: Callable[[int], dict[str, Any] | None], width: int) -> None:
        pending: Iterator[int] = iter(todo)

        def worker() -> None:
            while True:
                with self._lock:
                    index = None if self.stop else next(pending, None)
                if index is None:
                    return
                try:
                    self._finished(index, fn(index))
                except ItemPause as pause:
                    # An effect to settle holds only its item: the others go on. A budget
                    # reached or a permission missing would stop them too: none starts.
                    with self._lock:
                        self.pauses.append((index, pause.payload))
                        if pause.payload.get("kind") != "effect":
                            self.stop = True
                    continue
                except BaseException as exc:
                    # A failed item, a control exception or a failed write (a lost lease):
                    # no new item starts; the node's own thread raises it.
                    with self._lock:
                        self.stop = True
                        if self.error is None:
                            self.error = exc
                    return

        # One copy of the node's context per thread: a context cannot be entered twice.
        threads = [
            threading.Thread(
                target=contextvars.copy_context().run,
                args=(worker,),
                name=f"longtask-{self.info.name}-{n}",
                daemon=True,
            )
            for n in range(min(width, len(todo)))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def halt(self) -> None:
        with self._lock:
            self.stop = True

    def _finished(self, index: int, error: dict[str, Any] | None) -> None:
        now = time.monotonic()
        with self._lock:
            if error is None:
                self.done += 1
            else:
                self.failed += 1
                if len(self.failed_items) < FAILED_SHOWN or index < self.failed_items[-1]["index"]:
                    self.failed_items.append({"index": index, **error})
                    self.failed_items.sort(key=lambda f: int(f["index"]))
                    del self.failed_items[FAILED_SHOWN:]
            self._since += 1
            # About one event per max_parallel items, at most one per PROGRESS_INTERVAL.
            if self._since < self.every or now - self._last < PROGRESS_INTERVAL:
                return
            self._since, self._last = 0, now
            self.progress()
        # This item's events and those before it commit now, not with the node's checkpoint.
        self.env.events.flush(self.call.thread_id)

    def progress(self, *, last: bool = False) -> None:
        if last and self._reported == self.done + self.failed:
            return
        self._reported = self.done + self.failed
        self.env.emit(
            self.call,
            "step.progress",
            self.call.key("step.progress", self.digest, self.done + self.failed),
            self.info,
            data={
                "done": self.done,
                "total": self.total,
                "failed": self.failed,
                "failed_items": list(self.failed_items),
            },
        )


def _items_of(step: MapStep, env: StepEnv, call: NodeCall, info: StepInfo, state: Any) -> Any:
    ctx = env.context(call, info, state)
    items = call_step(step.over, (ctx,), step.timeout, f"over() of step {step.name!r}")
    if isinstance(items, (str, bytes, dict)) or not hasattr(items, "__iter__"):
        raise InvalidInput(
            f"over() of map step {step.name!r} must return a list of items, "
            f"got {type(items).__name__}"
        )
    return to_jsonable_python(list(items))


def map_node(step: MapStep, info: StepInfo, env: StepEnv) -> Node:
    store = env.store
    channel = result_channel(step.name)
    rerun_failed = step.on_item_error == "fail"

    def node(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        call = NodeCall.from_config(config)
        reason = skipped_by(state, info, env.pauses)
        if reason:
            return skip_update(env, call, info, reason)
        # Numbered after an attempt a dead process abandoned (as a function step's are).
        attempt = first_attempt(env, call, info)
        # Started first, as every kind of step is: it is where a stored cancel is seen.
        step_started(env, call, info, attempt)
        check_limits(env, call, info)
        digest = _digest(state, info)
        stored = store.map_run(call.thread_id, step.name, digest)
        if stored is None:
            try:
                items = _items_of(step, env, call, info, state)
                text, _ = to_json_bytes(items, f"the items of map step {step.name!r}")
            except (GraphBubbleUp, *CONTROL):
                raise
            except Exception as exc:
                step_failed(env, call, info, exc)
                raise
            store.map_begin(call.thread_id, step.name, digest, text.decode(), len(items))
        else:
            # Entered again (a crash, a pause, a failed item): the items of the first entry.
            items = json.loads(stored)
        outcomes = store.map_outcomes(call.thread_id, step.name, digest)
        failed = {} if rerun_failed else {i: e for i, (s, e) in outcomes.items() if s != "ok"}
        todo = [i for i in range(len(items)) if outcomes.get(i, ("",))[0] != "ok"]
        if not rerun_failed:
            todo = [i for i in todo if i not in failed]
        window = _Window(
            env,
            call,
            info,
            digest,
            total=len(items),
            done=sum(1 for s, _ in outcomes.values() if s == "ok"),
            failed=len(failed),
            failed_items=[{"index": i, **(failed[i] or {})} for i in sorted(failed)[:FAILED_SHOWN]],
            every=step.max_parallel,
        )

        def run_item(index: int) -> dict[str, Any] | None:
            """Run one item with its retries and store its outcome: None, or its error."""
            item = items[index]

            def attempt_fn(attempt: int) -> tuple[bytes, str | None]:
                ctx = ItemContext(
                    item=item,
                    item_index=index,
                    thread_id=call.thread_id,
                    info=info,
                    attempt=attempt,
                    state=state,
                    codec=env.codec,
                    inputs_model=env.inputs_model,
                    effects=env.effects_for(call, info, index, pause=_item_pause),
                    runtime=env.runtime_for(call, info, _item_pause),
                )
                what = f"item {index} of {step.name!r}"
                value = call_step(step.fn, (ctx, item), step.timeout, what)
                return to_json_bytes(value, f"the result of item {index} of step {step.name!r}")

            try:
                (data, model), attempt = with_retries(
                    env, call, info, step.retry, attempt_fn, item=index, pause=_item_pause
                )
            except (GraphBubbleUp, *CONTROL):
                raise
            except Exception as exc:
                if rerun_failed:
                    window.halt()  # no item starts after a failure that fails the step
                error = {
                    "error": describe(exc),
                    "type": type(exc).__name__,
                    "attempts": getattr(exc, "__longtask_attempt__", 1),
                }
                # Its retries' events first: no outcome is stored without them.
                env.events.flush(call.thread_id)
                store.map_put(call.thread_id, step.name, digest, index, error=error)
                if rerun_failed:
                    step_failed(env, call, info, exc, item=index)
                    raise
                return error
            if attempt > 1:
                env.events.flush(call.thread_id)
            store.map_put(
                call.thread_id, step.name, digest, index, result=data.decode(), model=model
            )
            return None

        window.run(todo, run_item, step.max_parallel)
        if window.error is not None:
            raise window.error
        if window.pauses:
            _pause(min(window.pauses, key=lambda p: p[0])[1])
        window.progress(last=True)
        attempt_done(env, call, info)
        step_completed(env, call, info, attempt, {"items": len(items), "failed": window.failed})
        collect = step.on_item_error == "collect"
        return {channel: map_envelope(call.thread_id, step.name, digest, len(items), collect)}

    node.__name__ = step.name
    return node


def _pause(payload: dict[str, Any]) -> NoReturn:
    """Pause the thread for one item, from the node's own thread. A resume value LangGraph
    hands back here was given for an earlier pause of this node, whose item has since read
    its settled ledger row and gone on: pass it by until this pause is raised."""
    while True:
        interrupt(payload)
