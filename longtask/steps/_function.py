"""The LangGraph node that runs a function step: events, retries, timeout, result channel."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp
from pydantic import BaseModel

from longtask.errors import StepTimeout
from longtask.model import FunctionStep, StepInfo
from longtask.steps._context import StepContext, result_channel
from longtask.store import Store, ValueCodec

#: attribute set on an exception raised by a step, naming the step (read by the Runner)
STEP_ATTR = "__longtask_step__"
RUN_KEY = "longtask_run"


@dataclass
class StepEnv:
    """What every node of one compiled task shares."""

    store: Store
    codec: ValueCodec
    inputs_model: type[BaseModel] | None = None
    sleep: Callable[[float], None] = field(default=time.sleep)


@dataclass(frozen=True)
class NodeCall:
    """Identity of one execution of a node, for idempotent event keys."""

    thread_id: str
    run: int
    task_id: str

    @classmethod
    def from_config(cls, config: RunnableConfig) -> NodeCall:
        conf = config.get("configurable") or {}
        ns = str((config.get("metadata") or {}).get("langgraph_checkpoint_ns", ""))
        return cls(
            thread_id=str(conf.get("thread_id")),
            run=int(conf.get(RUN_KEY, 0)),
            task_id=ns.rsplit(":", 1)[-1],
        )

    def key(self, *parts: object) -> str:
        return "/".join(str(p) for p in (self.run, self.task_id, *parts))


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _call(fn: Callable[..., Any], ctx: StepContext, timeout: float | None) -> Any:
    if inspect.iscoroutinefunction(fn):

        async def main() -> Any:
            return await asyncio.wait_for(fn(ctx), timeout)

        try:
            return asyncio.run(main())
        except TimeoutError as exc:
            raise StepTimeout(f"step {ctx.step!r} did not finish within {timeout} s") from exc
    if timeout is None:
        return fn(ctx)
    # A thread cannot be killed: on timeout the step is failed and its thread abandoned.
    # The copied context keeps LangGraph's config visible inside the function.
    box: dict[str, Any] = {}
    run_ctx = contextvars.copy_context()

    def target() -> None:
        try:
            box["value"] = run_ctx.run(fn, ctx)
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"longtask-step-{ctx.step}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise StepTimeout(f"step {ctx.step!r} did not finish within {timeout} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def function_node(
    step: FunctionStep, info: StepInfo, env: StepEnv
) -> Callable[[dict[str, Any], RunnableConfig], dict[str, Any]]:
    retry = step.retry
    max_attempts = retry.max_attempts if retry else 1
    channel = result_channel(step.name)

    def node(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        call = NodeCall.from_config(config)
        store = env.store
        store.append_event(
            call.thread_id, "stage.started", key=f"stage.started/{info.stage}", stage=info.stage
        )
        attempt = 1
        while True:
            store.append_event(
                call.thread_id,
                "step.started",
                key=call.key("step.started", attempt),
                stage=info.stage,
                step=step.name,
                attempt=attempt,
            )
            ctx = StepContext(
                thread_id=call.thread_id,
                info=info,
                attempt=attempt,
                state=state,
                codec=env.codec,
                inputs_model=env.inputs_model,
            )
            started = time.monotonic()
            try:
                value = _call(step.fn, ctx, step.timeout)
                update = {channel: env.codec.encode(value, f"the result of step {step.name!r}")}
            except GraphBubbleUp:
                # interrupt() and friends are control flow, not failures.
                raise
            except Exception as exc:
                error = _describe(exc)
                if attempt < max_attempts and retry is not None:
                    wait = retry.wait_before(attempt + 1)
                    if retry.jitter:
                        wait += random.uniform(0, wait * 0.1)
                    store.append_event(
                        call.thread_id,
                        "step.retry",
                        key=call.key("step.retry", attempt),
                        stage=info.stage,
                        step=step.name,
                        attempt=attempt,
                        data={"error": error, "wait": round(wait, 3), "next_attempt": attempt + 1},
                    )
                    env.sleep(wait)
                    attempt += 1
                    continue
                store.append_event(
                    call.thread_id,
                    "step.failed",
                    key=call.key("step.failed", attempt),
                    stage=info.stage,
                    step=step.name,
                    attempt=attempt,
                    data={"error": error, "type": type(exc).__name__},
                )
                setattr(exc, STEP_ATTR, step.name)
                raise
            store.append_event(
                call.thread_id,
                "step.completed",
                key=call.key("step.completed", attempt),
                stage=info.stage,
                step=step.name,
                attempt=attempt,
                data={"duration": round(time.monotonic() - started, 6)},
            )
            return update

    node.__name__ = step.name
    return node
