"""Sub-task steps: a LongTask started as a child thread of its own (or one per item of a
list known at run time), the parent step waiting for it as a pause. Pure pydantic."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

from longtask.model._canonical import canonical_digest
from longtask.model._steps import ItemErrorPolicy, Retry, Step, _as_retry, _qualname
from longtask.model._task import LongTask


def child_thread_id(parent: str, step: str, index: int, attempt: int) -> str:
    """The id of the child thread of ``parent``'s ``step`` for item ``index``, attempt
    ``attempt``: derived from a canonical encoding of the four, so every process (a resume
    after a crash, a worker) derives the same id and starting the child is idempotent. Step
    name, item and attempt stay readable; the digest makes it unique per parent and keeps
    it short however deep the tree grows."""
    digest = canonical_digest(
        {"parent": parent, "step": step, "item": index, "attempt": attempt},
        "a sub-task's identity",
        length=20,
    )
    return f"{step}.{index}.{attempt}-{digest}"


class SubtaskStep(Step):
    """Starts ``task`` as a child thread (``over`` given: one child per item) and waits,
    holding no process, until every child has ended. See :func:`subtask_step`."""

    kind: Literal["subtask"] = "subtask"
    #: the child LongTask; typed Any so that another value is reported with the
    #: definition's other problems
    task: Any
    #: ``inputs(ctx) -> dict`` (``inputs(ctx, item)`` with ``over``); default: no inputs,
    #: or the item itself with ``over``
    inputs: Any = None
    #: ``over(ctx) -> list``: the map form, one child per item
    over: Any = None
    #: the child's step whose result is the child's result (default: its last step)
    output: str | None = None
    on_item_error: ItemErrorPolicy = "fail"
    #: the step waits for its children at an ``interrupt()`` (see ``graphs._checked``)
    may_pause: ClassVar[bool] = True

    @property
    def output_step(self) -> str:
        if self.output is not None:
            return self.output
        assert isinstance(self.task, LongTask)
        return list(self.task.steps)[-1]

    def problems(self) -> list[str]:
        out = super().problems()
        if not isinstance(self.task, LongTask):
            out.append(
                f"step {self.name!r}: task must be a LongTask, got {type(self.task).__name__}"
            )
        elif self.output is not None and self.output not in self.task.steps:
            out.append(
                f"step {self.name!r}: output {self.output!r} is not a step of task "
                f"{self.task.name!r}; use one of {', '.join(self.task.steps)}"
            )
        for what in ("inputs", "over"):
            fn = getattr(self, what)
            if fn is not None and not callable(fn):
                out.append(f"step {self.name!r}: {what} must be a callable")
        if self.timeout is not None:
            out.append(
                f"step {self.name!r}: a sub-task step has no timeout; give the child task a "
                "deadline (LongTask(..., deadline=...)), which the parent's deadline bounds"
            )
        if self.over is None and self.on_item_error != "fail":
            out.append(f"step {self.name!r}: on_item_error is for the map form (over=...) only")
        return out

    def spec(self) -> dict[str, Any]:
        task = self.task
        return {
            **super().spec(),
            "task": (
                {"name": task.name, "version": task.version, "hash": task.definition_hash}
                if isinstance(task, LongTask)
                else repr(task)
            ),
            "inputs": _qualname(self.inputs) if self.inputs else None,
            "over": _qualname(self.over) if self.over else None,
            "output": self.output,
            "on_item_error": self.on_item_error,
        }


def subtask_step(
    name: str,
    task: LongTask,
    inputs: Callable[..., Any] | None = None,
    *,
    over: Callable[..., Any] | None = None,
    output: str | None = None,
    on_item_error: ItemErrorPolicy = "fail",
    after: Sequence[str] | str = (),
    retry: Retry | int | None = None,
    compensate: Callable[..., Any] | None = None,
) -> SubtaskStep:
    """A step that runs ``task``, another LongTask, as a child thread of its own.

    ``inputs(ctx)`` makes the child's inputs from the parent's inputs and earlier results.
    With ``over(ctx) -> list`` it is the map form: one child per item (``inputs(ctx, item)``,
    default the item itself), the items computed once and stored. Each child's thread id
    is derived from (parent, step, item, attempt), so a crash or retry of the parent never
    starts a second child for an item. The parent waits at a pause of kind ``subtask``,
    holding no process, until every child has ended; then the step's result is the child's
    result (the result of its ``output`` step, default its last step), or the list of them
    in item order. A failed child is started again as a fresh child while ``retry``
    attempts are left; then it fails the step, or with ``on_item_error="skip"``/``"collect"``
    (map form) is left out or listed, as for map steps.
    """
    return SubtaskStep(
        name=name,
        task=task,
        inputs=inputs,
        over=over,
        output=output,
        on_item_error=on_item_error,
        after=after,  # type: ignore[arg-type]  # normalised by the validator
        retry=_as_retry(retry),
        compensate=compensate,
    )
