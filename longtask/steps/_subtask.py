"""Sub-task steps: child LongTask threads started once, awaited at a pause.

The node (named after the step, so dependents' edges start from it as from any step):

- on the first entry computes the children's inputs (``inputs(ctx)``, or one per item of
  ``over(ctx)``), checks them against the child task, and records every child in
  ``longtask_subtasks`` in one statement, each with a thread id derived from (parent, step,
  item, attempt) (``model.child_thread_id``). A later entry (a resume after a crash, the
  children's end) reads the rows back and never calls ``over`` again;
- makes sure each recorded child has its thread record (a record that exists is adopted,
  not made again: the id is the child's identity), and a failed child with attempts left
  gets a fresh row (attempt + 1, a new derived id);
- hands the children that have not run to the runtime (``ChildThreads.launch``: queued for
  workers, or run by this process once the parent's run has stopped) and pauses at an
  ``interrupt()`` of kind ``subtask``: the parent holds no process while they run. The last
  child's end resumes the parent (``runtime._subtasks``), and the node looks again;
- once every child has ended, records ``subtask.completed``/``subtask.failed`` per child
  (keyed by the child's id: once each however often the node runs) and returns the child's
  result, or the results in item order (the map form).

Nothing before ``interrupt()`` has an effect that is not safe to repeat: rows and records
are inserted if missing, events are keyed by the child.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp
from langgraph.types import interrupt
from pydantic_core import to_jsonable_python

from longtask.errors import InvalidInput, SubtaskFailed
from longtask.model import LongTask, StepInfo, SubtaskStep, child_thread_id
from longtask.steps._context import result_channel
from longtask.steps._function import (
    CONTROL,
    NodeCall,
    StepEnv,
    call_step,
    check_limits,
    skip_update,
    skipped_by,
    step_completed,
    step_failed,
    step_started,
)
from longtask.store._subtasks import ENDED, SubtaskRow

Node = Callable[[dict[str, Any], RunnableConfig], Any]

#: open children named in the pause's request (the rest are counted)
SHOWN = 20


class ChildThreads(Protocol):
    """What a sub-task node needs of the run core (``runtime._subtasks.Subtasks``)."""

    def check_inputs(self, task: LongTask, inputs: Any) -> Any:
        """``inputs`` checked against ``task``'s inputs model, as JSON (InvalidInput)."""

    def spawn(self, row: SubtaskRow, task: LongTask) -> None:
        """The child's thread record, made if it has none (with the parent's mode)."""

    def launch(self, parent: str, children: list[str], task: LongTask) -> None:
        """Have the children run: queued for workers, or after the parent's run stops."""

    def result(self, child: str, step: str) -> Any:
        """The stored result of the child's ``step``."""

    def error(self, child: str) -> dict[str, Any]:
        """What the child's record says went wrong (empty for a cancelled child)."""


def _child_inputs(
    step: SubtaskStep, env: StepEnv, call: NodeCall, info: StepInfo, state: Any
) -> list[Any]:
    ctx = env.context(call, info, state)
    if step.over is None:
        one = (
            call_step(step.inputs, (ctx,), None, f"inputs() of step {step.name!r}")
            if step.inputs
            else {}
        )
        return [one]
    items = call_step(step.over, (ctx,), None, f"over() of step {step.name!r}")
    if isinstance(items, (str, bytes, dict)) or not hasattr(items, "__iter__"):
        raise InvalidInput(
            f"over() of sub-task step {step.name!r} must return a list of items, "
            f"got {type(items).__name__}"
        )
    items = to_jsonable_python(list(items))
    if step.inputs is None:
        return list(items)
    what = f"inputs() of step {step.name!r}"
    return [call_step(step.inputs, (ctx, item), None, what) for item in items]


def _latest(rows: list[SubtaskRow]) -> dict[int, SubtaskRow]:
    out: dict[int, SubtaskRow] = {}
    for row in rows:  # ordered by item, then attempt: the last one stands
        out[row.index] = row
    return dict(sorted(out.items()))


def subtask_node(step: SubtaskStep, info: StepInfo, env: StepEnv) -> Node:
    channel = result_channel(step.name)
    task = step.task
    assert isinstance(task, LongTask)
    attempts = step.retry.max_attempts if step.retry else 1
    output = step.output_step

    def hooks() -> ChildThreads:
        if env.children is None:
            raise InvalidInput(
                f"step {step.name!r} starts sub-tasks, which need a Runner: run the task with "
                "Runner.start (not the compiled graph alone)"
            )
        children: ChildThreads = env.children
        return children

    def first_entry(call: NodeCall, state: Any) -> None:
        children = hooks()
        step_started(env, call, info)
        try:
            inputs = [
                children.check_inputs(task, i) for i in _child_inputs(step, env, call, info, state)
            ]
        except (GraphBubbleUp, *CONTROL):
            raise
        except Exception as exc:
            step_failed(env, call, info, exc)
            raise
        env.store.subtask_add(
            [
                (
                    call.thread_id,
                    step.name,
                    index,
                    1,
                    child_thread_id(call.thread_id, step.name, index, 1),
                    json.dumps(value),
                )
                for index, value in enumerate(inputs)
            ]
        )

    def ended_events(call: NodeCall, rows: list[SubtaskRow]) -> None:
        for row in rows:
            if row.status not in ENDED:
                continue
            env.emit(
                call,
                "subtask.completed" if row.status == "completed" else "subtask.failed",
                f"subtask.ended/{row.child}",
                info,
                attempt=row.attempt,
                data={"thread_id": row.child, "item": row.index, "status": row.status},
            )

    def node(state: dict[str, Any], config: RunnableConfig) -> Any:
        call = NodeCall.from_config(config)
        reason = skipped_by(state, info, env.pauses)
        if reason:
            return skip_update(env, call, info, reason)
        check_limits(env, call, info)
        children = hooks()
        rows = env.store.subtask_rows(call.thread_id, step.name)
        if not rows:
            first_entry(call, state)
            rows = env.store.subtask_rows(call.thread_id, step.name)
        while True:
            latest = _latest(rows)
            again = []
            for row in latest.values():
                if row.status in (None, "pending"):
                    children.spawn(row, task)
                    env.emit(
                        call,
                        "subtask.started",
                        f"subtask.started/{row.child}",
                        info,
                        attempt=row.attempt,
                        data={"thread_id": row.child, "item": row.index, "task": task.name},
                    )
                elif row.status == "failed" and row.attempt < attempts:
                    # A fresh child: the failed one keeps its thread and history.
                    n = row.attempt + 1
                    new = child_thread_id(call.thread_id, step.name, row.index, n)
                    again.append((call.thread_id, step.name, row.index, n, new, row.inputs))
            if again:
                env.store.subtask_add(again)
                rows = env.store.subtask_rows(call.thread_id, step.name)
                continue
            waiting = [r for r in latest.values() if r.status not in ENDED]
            if not waiting:
                break
            children.launch(
                call.thread_id,
                [r.child for r in waiting if r.status in (None, "pending", "running")],
                task,
            )
            interrupt(
                {
                    "kind": "subtask",
                    "step": step.name,
                    "reason": f"waiting for {len(waiting)} of {len(latest)} sub-tasks",
                    "children": [r.child for r in waiting[:SHOWN]],
                    "open": len(waiting),
                    "total": len(latest),
                }
            )
            # Resumed (a child's end, or a plain resume): look again.
            rows = env.store.subtask_rows(call.thread_id, step.name)
        ended_events(call, rows)
        return finish(call, latest)

    def finish(call: NodeCall, latest: dict[int, SubtaskRow]) -> dict[str, Any]:
        children = hooks()
        results: list[Any] = []
        errors: list[dict[str, Any]] = []
        for index, row in latest.items():
            if row.status == "completed":
                results.append(children.result(row.child, output))
                continue
            error = children.error(row.child)
            errors.append(
                {
                    "index": index,
                    "item": json.loads(row.inputs) if row.inputs else None,
                    "thread_id": row.child,
                    "status": row.status,
                    "error": error.get("message") or str(row.status),
                    "type": error.get("type") or str(row.status),
                    "attempts": row.attempt,
                }
            )
        if errors and (step.over is None or step.on_item_error == "fail"):
            first = errors[0]
            exc = SubtaskFailed(
                f"sub-task {first['thread_id']} (item {first['index']}) {first['status']}: "
                f"{first['error']}; see `longtask status {first['thread_id']}`"
            )
            step_failed(env, call, info, exc, item=first["index"])
            raise exc
        value: Any = results[0] if step.over is None else results
        if step.over is not None and step.on_item_error == "collect":
            value = {"results": results, "errors": errors}
        step_completed(env, call, info, 1, {"children": len(latest), "failed": len(errors)})
        return {channel: env.codec.encode(value, f"the result of sub-task step {step.name!r}")}

    node.__name__ = step.name
    return node
