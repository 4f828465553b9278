"""Map steps: one small group of nodes that LangGraph runs once per item with ``Send``.

Three nodes per map step, whatever the number of items:

- ``<step>.map`` (dispatch): on first entry computes the items with ``over(ctx)`` and
  stores them once; then sends the next wave of at most ``max_parallel`` items to
  ``<step>.item``; when every item is done, assembles the step's result in item order.
- ``<step>.item``: runs ``fn(ctx, item)`` for one item and records its outcome in
  ``longtask_map_items`` as soon as it finishes. An item already recorded as done (the
  process died after the item finished but before LangGraph saved its task) is not run
  again.
- ``<step>`` (the step itself): a pass-through that dependents' edges start from, so they
  run once, after the whole map.

Item results are written once, to our table; the LangGraph state carries only the map's
cursor (constant size), so storage grows linearly with the number of items.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp
from langgraph.types import Command, Send
from pydantic_core import to_jsonable_python

from longtask.errors import InvalidInput
from longtask.model import MapStep, StepInfo
from longtask.steps._context import INPUTS_CHANNEL, ItemContext, result_channel
from longtask.steps._function import (
    CONTROL,
    NodeCall,
    StepEnv,
    call_step,
    check_limits,
    describe,
    step_completed,
    step_failed,
    step_started,
    with_retries,
)
from longtask.steps._pause import skip_update, skipped_by
from longtask.store._values import to_json_bytes

Node = Callable[[dict[str, Any], RunnableConfig], Any]


def dispatch_node_name(step: str) -> str:
    return f"{step}.map"


def item_node_name(step: str) -> str:
    return f"{step}.item"


def map_channel(step: str) -> str:
    return f"map.{step}"


def _digest(state: dict[str, Any], info: StepInfo) -> str:
    """Identity of one map run: its inputs. A fork that changes them starts a new map."""
    basis = {
        "inputs": state.get(INPUTS_CHANNEL),
        "deps": {a: state.get(result_channel(a)) for a in sorted(info.ancestors)},
    }
    return hashlib.sha256(json.dumps(basis, sort_keys=True, default=str).encode()).hexdigest()[:32]


def map_nodes(step: MapStep, info: StepInfo, env: StepEnv) -> tuple[Node, Node, Node]:
    store = env.store
    cursor = map_channel(step.name)
    item_node = item_node_name(step.name)

    def context_state(state: dict[str, Any]) -> dict[str, Any]:
        keep = {INPUTS_CHANNEL} | {result_channel(a) for a in info.ancestors}
        return {k: v for k, v in state.items() if k in keep}

    def dispatch(state: dict[str, Any], config: RunnableConfig) -> Command[Any]:
        call = NodeCall.from_config(config)
        reason = skipped_by(state, info, env.pauses)
        if reason:
            return Command(update=skip_update(env, call, info, reason), goto=step.name)
        digest = _digest(state, info)
        m = state.get(cursor)
        if not m or m.get("digest") != digest:
            check_limits(env, call, info)
            step_started(env, call, info)
            ctx = env.context(call, info, state)
            try:
                items = call_step(step.over, (ctx,), step.timeout, f"over() of step {step.name!r}")
                if isinstance(items, (str, bytes, dict)) or not hasattr(items, "__iter__"):
                    raise InvalidInput(
                        f"over() of map step {step.name!r} must return a list of items, "
                        f"got {type(items).__name__}"
                    )
                items = to_jsonable_python(list(items))
                items_env = env.codec.encode(items, f"the items of map step {step.name!r}")
            except (GraphBubbleUp, *CONTROL):
                raise
            except Exception as exc:
                step_failed(env, call, info, exc)
                raise
            store.map_begin(call.thread_id, step.name, digest, len(items))
            m = {"digest": digest, "items": items_env, "total": len(items), "next": 0}
        total = int(m["total"])
        start = int(m["next"])
        if start < total:
            if start > 0:
                check_limits(env, call, info)  # between waves: a cancel stops the map here
            indices = list(range(start, min(total, start + step.max_parallel)))
            if start > 0:
                _progress(env, call, info, step.name, digest, wave=start)
            return _wave(m, indices, state, {cursor: {**m, "next": indices[-1] + 1}}, call.run)
        rows = store.map_items(call.thread_id, step.name, digest)
        missing = sorted(set(range(total)) - {r.index for r in rows})
        if missing:
            # Items that have no outcome (a definition change, a lost write): send them again.
            return _wave(m, missing[: step.max_parallel], state, {}, call.run)
        result = _assemble(step, rows, env, m)
        progress = _progress(env, call, info, step.name, digest, wave=total)
        step_completed(
            env,
            call,
            info,
            1,
            {"items": total, "failed": len(progress.failed) if progress else 0},
        )
        update = {
            result_channel(step.name): env.codec.encode(result, f"the result of step {step.name!r}")
        }
        return Command(update=update, goto=step.name)

    def _wave(
        m: dict[str, Any],
        indices: list[int],
        state: dict[str, Any],
        update: dict[str, Any],
        run: int,
    ) -> Command[Any]:
        items = env.codec.decode(m["items"])
        shared = context_state(state)
        sends = [
            Send(
                item_node,
                {
                    "index": i,
                    "digest": m["digest"],
                    "run": run,
                    "item": env.codec.encode(items[i], f"item {i} of map step {step.name!r}"),
                    "state": shared,
                },
            )
            for i in indices
        ]
        return Command(update=update, goto=sends)

    def run_item(payload: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        call = NodeCall.from_config(config)
        index = int(payload["index"])
        digest = str(payload["digest"])
        # An item sent in this same run cannot have finished before: only an item whose
        # wave was interrupted (a crash, a failed sibling) may already have its result.
        # (Run 0: driven by LangGraph directly, not the Runner; always check.)
        if payload.get("run") != call.run or call.run == 0:
            done = store.map_item(call.thread_id, step.name, digest, index)
            if done is not None and done.status == "ok":
                return {}
        item = env.codec.decode(payload["item"])

        def attempt_fn(attempt: int) -> tuple[bytes, str | None]:
            ctx = ItemContext(
                item=item,
                item_index=index,
                thread_id=call.thread_id,
                info=info,
                attempt=attempt,
                state=payload["state"],
                codec=env.codec,
                inputs_model=env.inputs_model,
                effects=env.effects_for(call, info, index),
                runtime=env.runtime_for(call, info),
            )
            value = call_step(step.fn, (ctx, item), step.timeout, f"item {index} of {step.name!r}")
            return to_json_bytes(value, f"the result of item {index} of step {step.name!r}")

        try:
            (data, model), _attempt = with_retries(
                env, call, info, step.retry, attempt_fn, item=index
            )
        except (GraphBubbleUp, *CONTROL):
            raise
        except Exception as exc:
            error = {
                "error": describe(exc),
                "type": type(exc).__name__,
                "attempts": getattr(exc, "__longtask_attempt__", 1),
            }
            store.map_put(call.thread_id, step.name, digest, index, error=error)
            if step.on_item_error == "fail":
                step_failed(env, call, info, exc, item=index)
                raise
            return {}
        store.map_put(call.thread_id, step.name, digest, index, result=data.decode(), model=model)
        return {}

    def finish(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return {}

    dispatch.__name__ = dispatch_node_name(step.name)
    run_item.__name__ = item_node
    finish.__name__ = step.name
    return dispatch, run_item, finish


def _assemble(step: MapStep, rows: list[Any], env: StepEnv, m: dict[str, Any]) -> Any:
    results: list[Any] = []
    errors: list[dict[str, Any]] = []
    items: list[Any] | None = None
    for row in rows:
        if row.status == "ok":
            # Kept as JSON: a pydantic item result arrives in the list as its dict.
            results.append(json.loads(row.result) if row.result is not None else None)
        else:
            if items is None:
                items = env.codec.decode(m["items"])
            errors.append({"index": row.index, "item": items[row.index], **(row.error or {})})
    if step.on_item_error == "collect":
        return {"results": results, "errors": errors}
    return results


def _progress(
    env: StepEnv, call: NodeCall, info: StepInfo, step: str, digest: str, *, wave: int
) -> Any:
    progress = env.store.map_progress(call.thread_id, step)
    if progress is None:
        return None
    env.emit(
        call,
        "step.progress",
        call.key("step.progress", digest, wave),
        info,
        data={
            "done": progress.done,
            "total": progress.total,
            "failed": len(progress.failed),
            "failed_items": progress.failed[:5],
        },
    )
    return progress
