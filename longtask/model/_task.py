"""LongTask: the definition, its validation and its content hash."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from datetime import timedelta
from functools import cached_property
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    SkipValidation,
    field_validator,
    model_validator,
)

from longtask.errors import DefinitionError
from longtask.model._agent import FixLoop
from longtask.model._notify import Notify, as_notify
from longtask.model._schedule import Schedule
from longtask.model._steps import Budget, PauseStep, Retry, Stage, Step

#: Step and stage names become LangGraph node names, state channel names and keys in our
#: tables, so they are kept to a small, safe alphabet.
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
#: Names we use ourselves (state channels, LangGraph's own nodes) or that would read badly.
RESERVED_NAMES = frozenset({"inputs", "input", "output", "start", "end", "state", "config"})
RESERVED_PREFIXES = ("lt_", "langgraph")


def name_problem(kind: str, name: str) -> str | None:
    if not isinstance(name, str) or not NAME_RE.match(name):
        return (
            f"{kind} name {name!r} is not allowed: use 1-63 lowercase letters, digits and "
            "underscores, starting with a letter (it becomes a graph node and a checkpoint key)"
        )
    if name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES):
        return f"{kind} name {name!r} is reserved; choose another name"
    return None


class Ancestors(AbstractSet[str]):
    """The steps a step follows, as a read-only set: a bit mask over the task's steps.

    A chain of n steps has n²/2 ancestor entries in all; as frozensets, 1,600 steps took
    ~0.2 s and tens of MB to lay out. A mask is built in one pass of big-integer ORs, and
    membership is a bit test."""

    __slots__ = ("_index", "_mask", "_names")

    def __init__(self, mask: int, names: Sequence[str], index: Mapping[str, int]) -> None:
        self._mask = mask
        self._names = names
        self._index = index

    def __contains__(self, name: object) -> bool:
        at = self._index.get(name) if isinstance(name, str) else None
        return at is not None and bool(self._mask >> at & 1)

    def __iter__(self) -> Iterator[str]:
        mask, at = self._mask, 0
        while mask:
            if mask & 1:
                yield self._names[at]
            mask >>= 1
            at += 1

    def __len__(self) -> int:
        return self._mask.bit_count()

    def __hash__(self) -> int:
        return self._hash()

    def __repr__(self) -> str:
        return f"Ancestors({sorted(self)!r})"

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> AbstractSet[Any]:
        # what the set operators (&, |, -) return
        return frozenset(it)


class StepInfo(BaseModel):
    """Where a step sits in the task: its stage and every step it waits for."""

    model_config = ConfigDict(frozen=True)

    name: str
    stage: str
    stage_index: int
    kind: str
    #: direct dependencies: every step of the previous stage plus ``after``
    depends_on: tuple[str, ...]
    #: every step that is guaranteed to have finished before this one starts
    ancestors: SkipValidation[AbstractSet[str]]


class LongTask(BaseModel):
    """A long, multi-stage task: stages of steps with dependencies.

    ``inputs`` is an optional pydantic model class the task's inputs are validated against.
    Validation runs when the object is created and reports every problem in one
    :class:`~longtask.errors.DefinitionError`.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    version: str = "1"
    stages: tuple[Stage, ...]
    inputs: type[BaseModel] | None = None
    description: str = ""
    #: retry policy of every step that does not set its own
    retry: Retry | None = None
    #: limits on tokens, cost, tool calls and running time of one thread
    budget: Budget | None = None
    #: no step starts later than this long after the thread started (waits included)
    deadline: float | None = None
    #: what reaching the budget or the deadline does: pause for a person, or fail
    on_limit: Literal["pause", "fail"] = "pause"
    #: when a step fails for good, undo the completed steps (their ``compensate``)
    compensate_on_failure: bool = False
    #: model of agent steps that do not name one (else ``$LONGTASK_MODEL``, ``gpt-4o-mini``)
    model: str | None = None
    #: when to start the task on its own (registered with ``longtask schedule add TASKREF``);
    #: not part of the definition hash: a schedule changes when threads start, not how
    schedules: tuple[Schedule, ...] = ()
    #: who is told when a thread of the task pauses, fails or completes (a URL, a list of
    #: URLs or a Notify; steps may add their own); not part of the definition hash either
    notify: Notify | None = None

    _module: str | None = PrivateAttr(default=None)

    @field_validator("retry", mode="before")
    @classmethod
    def _retry(cls, v: Any) -> Any:
        return Retry(max_attempts=v) if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("notify", mode="before")
    @classmethod
    def _notify(cls, v: Any) -> Any:
        return as_notify(v)

    @field_validator("deadline", mode="before")
    @classmethod
    def _deadline(cls, v: Any) -> Any:
        return v.total_seconds() if isinstance(v, timedelta) else v

    def __init__(self, name: str, stages: Sequence[Stage] = (), **kw: Any) -> None:
        super().__init__(name=name, stages=tuple(stages), **kw)
        # Remember where the task was defined so a thread can record a reference that a
        # later process (the CLI, a worker) can import it by.
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "").startswith("pydantic"):
            frame = frame.f_back  # type: ignore[assignment]
        self._module = frame.f_globals.get("__name__") if frame is not None else None

    @model_validator(mode="after")
    def _validate(self) -> LongTask:
        problems = list(_problems(self))
        if problems:
            raise DefinitionError(self.name if isinstance(self.name, str) else "?", problems)
        return self

    # -- structure ---------------------------------------------------------------------------

    def iter_steps(self) -> Iterator[tuple[Stage, Step]]:
        for stage in self.stages:
            for step in stage.steps:
                yield stage, step

    @cached_property
    def steps(self) -> dict[str, Step]:
        return {step.name: step for _, step in self.iter_steps()}

    @cached_property
    def layout(self) -> dict[str, StepInfo]:
        """Stage, direct dependencies and ancestors of every step, in definition order."""
        out: dict[str, StepInfo] = {}
        previous: tuple[str, ...] = ()
        for index, stage in enumerate(self.stages):
            for step in stage.steps:
                deps = tuple(dict.fromkeys((*previous, *step.after)))
                out[step.name] = StepInfo(
                    name=step.name,
                    stage=stage.name,
                    stage_index=index,
                    kind=step.kind,
                    depends_on=deps,
                    ancestors=frozenset(),
                )
            previous = tuple(s.name for s in stage.steps)
        # Ancestors in topological order (a step's dependencies may come later in the
        # stage order through ``after``), one bit per step in definition order.
        names = list(out)
        bit = {name: at for at, name in enumerate(names)}
        masks: dict[str, int] = {}
        for name in _topological(out):
            info = out[name]
            mask = 0
            for dep in info.depends_on:
                mask |= masks[dep] | 1 << bit[dep]
            masks[name] = mask
            out[name] = info.model_copy(update={"ancestors": Ancestors(mask, names, bit)})
        return out

    def spec(self) -> dict[str, Any]:
        """The JSON-able structure the definition hash is computed from."""
        # Policies enter only when set, so that older definitions keep their hash.
        policies = {
            "retry": self.retry.model_dump() if self.retry else None,
            "budget": self.budget.model_dump() if self.budget else None,
            "deadline": self.deadline,
            "on_limit": self.on_limit if self.on_limit != "pause" else None,
            "compensate_on_failure": self.compensate_on_failure or None,
            "model": self.model,
        }
        return {
            **{k: v for k, v in policies.items() if v is not None},
            "name": self.name,
            "version": self.version,
            "inputs": (
                json.dumps(self.inputs.model_json_schema(), sort_keys=True) if self.inputs else None
            ),
            "stages": [
                {"name": stage.name, "steps": [step.spec() for step in stage.steps]}
                for stage in self.stages
            ],
        }

    @cached_property
    def definition_hash(self) -> str:
        canonical = json.dumps(self.spec(), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()


def _topological(layout: dict[str, StepInfo]) -> list[str]:
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(n: str) -> None:
        if state.get(n) == 2:
            return
        state[n] = 1
        for d in layout[n].depends_on:
            if d in layout and state.get(d) != 1:
                visit(d)
        state[n] = 2
        order.append(n)

    for n in layout:
        visit(n)
    return order


def _problems(task: LongTask) -> Iterator[str]:
    if not task.name.strip():
        yield "task name must not be empty"
    if not task.version:
        yield "task version must not be empty"
    if not task.stages:
        yield "a task needs at least one stage"
    if task.notify is not None:
        yield from task.notify.problems("task notify")
    if task.retry is not None:
        yield from (f"task retry {p}" for p in task.retry.problems())
    if task.budget is not None:
        yield from task.budget.problems()
    if task.deadline is not None and task.deadline <= 0:
        yield f"deadline must be greater than 0 (got {task.deadline})"
    stage_of: dict[str, int] = {}
    seen_stages: set[str] = set()
    for index, stage in enumerate(task.stages):
        if (p := name_problem("stage", stage.name)) is not None:
            yield p
        if stage.name in seen_stages:
            yield f"duplicate stage name {stage.name!r}"
        seen_stages.add(stage.name)
        if not stage.steps:
            yield f"stage {stage.name!r} has no steps"
        for step in stage.steps:
            if (p := name_problem("step", step.name)) is not None:
                yield p
            if step.name in stage_of:
                yield (
                    f"duplicate step name {step.name!r} (in stage "
                    f"{task.stages[stage_of[step.name]].name!r} and stage {stage.name!r})"
                )
            else:
                stage_of[step.name] = index
            yield from step.problems()
    for step in task.steps.values():
        yield from _fix_problems(step, stage_of)
    yield from _schedule_problems(task)
    # Dependencies are checked against the first step of each name, so one typo produces
    # one problem rather than a cascade.
    graph: dict[str, list[str]] = {}
    for index, stage in enumerate(task.stages):
        for step in stage.steps:
            if step.name in graph:
                continue
            graph[step.name] = []
            for dep in step.after:
                if dep == step.name:
                    yield f"step {step.name!r} depends on itself (after={list(step.after)})"
                elif dep not in stage_of:
                    yield f"step {step.name!r} depends on unknown step {dep!r}"
                elif stage_of[dep] > index:
                    yield (
                        f"step {step.name!r} in stage {stage.name!r} depends on {dep!r}, which "
                        f"is in the later stage {task.stages[stage_of[dep]].name!r}"
                    )
                elif stage_of[dep] == index:
                    graph[step.name].append(dep)
    yield from _cycles(graph)
    for index, stage in enumerate(task.stages):
        for step in stage.steps:
            if not isinstance(step, PauseStep):
                continue
            for policy, target in step.targets().items():
                if target not in stage_of:
                    yield (
                        f"step {step.name!r}: {policy}={target!r} is neither 'fail' nor a step "
                        "of this task"
                    )
                elif stage_of[target] <= index:
                    yield (
                        f"step {step.name!r}: {policy}={target!r} must name a step in a later "
                        "stage (execution skips ahead to it)"
                    )


def _schedule_problems(task: LongTask) -> Iterator[str]:
    seen: set[str] = set()
    for schedule in task.schedules:
        if not isinstance(schedule, Schedule):
            yield f"schedules must hold Schedule(...) objects, got {schedule!r:.60}"
            continue
        found = schedule.problems(task)
        yield from found
        if found:
            continue  # a schedule with problems may have no name yet (inputs not JSON)
        name = schedule.name_for(task.name)
        if name in seen:
            yield (
                f"two schedules are named {name!r}; give each a name=... of its own"
                if schedule.name
                else f"schedule {schedule.cron!r} is declared twice with the same timezone "
                "and inputs"
            )
        seen.add(name)


def _fix_problems(step: Step, names: dict[str, int]) -> Iterator[str]:
    fix = getattr(step, "on_failure", None)
    if fix is None:
        return
    if not isinstance(fix, FixLoop):
        yield f"step {step.name!r}: on_failure must be fix_with(agent_step(...)), got {fix!r}"
        return
    yield from fix.problems(step.name)
    if (p := name_problem("step", fix.agent.name)) is not None:
        yield p
    if fix.agent.name in names:
        yield (
            f"step {step.name!r}: its fix agent {fix.agent.name!r} has the name of a step; "
            "a fix agent runs only inside the loop, so give it a name of its own"
        )


def _cycles(graph: dict[str, list[str]]) -> Iterator[str]:
    """Report each cycle among same-stage ``after=`` edges once."""
    colour: dict[str, int] = {}
    reported: set[frozenset[str]] = set()
    stack: list[str] = []

    def visit(n: str) -> Iterator[str]:
        colour[n] = 1
        stack.append(n)
        for d in graph.get(n, ()):
            if colour.get(d) == 1:
                cycle = [*stack[stack.index(d) :], d]
                key = frozenset(cycle)
                if key not in reported:
                    reported.add(key)
                    yield "dependency cycle: " + " -> ".join(reversed(cycle))
            elif colour.get(d) is None:
                yield from visit(d)
        stack.pop()
        colour[n] = 2

    for n in graph:
        if colour.get(n) is None:
            yield from visit(n)
