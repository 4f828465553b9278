"""What moving a thread to another definition of its task would do: a ``MigrationPlan``.

Computed from what the thread recorded (its definition summary, its latest checkpoint's
results and pause requests) and the target definition, writing nothing, so that a dry run,
``longtask check`` and the real migration (which computes it again under the thread's lock)
all show the same plan.

The rules, step by step (names are the target's; ``renames`` maps old names to new ones):

- a step that has a result keeps it when the target has the step (by name or rename) and
  every dependency it has in the target keeps its result too; otherwise its result is
  dropped and it runs again (listed in ``results_dropped`` and ``will_run``);
- a step of the thread that the target no longer has is dropped, with its result;
- a pending pause (an approval or wait whose request is recorded, not yet answered) is
  kept when the target has it; it is asked again at once on the target, and an approval
  whose plan hash differs under the target's plan (the plan-hash rule of approvals) is
  re-asked: a decision for the old plan will not count;
- a pending pause inserted behind a new step of the target (a dependency with no result)
  is re-asked after that step has run.

A migration is refused (``refusals``) when: a result it would drop is one a step of the
target still depends on through the rename map (``--map`` onto a step whose own result is
lost), a result of a removed step was declared (``after=``) by a step that keeps its result
or runs on the target, a pending pause would be dropped (the thread would go on without the
answer it waits for: map it to its new name or answer it first), another process holds the
thread, the thread is completed or cancelled, or it already runs on that definition.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from longtask.model import LongTask, PauseStep
from longtask.runtime._views import definition_changes, definition_summary

#: statuses a thread can still be moved in
LIVE = ("pending", "running", "waiting_user", "waiting_external", "failed")


@dataclass(frozen=True)
class MigrationPlan:
    """One thread's move to another definition (JSON: ``to_json``)."""

    thread_id: str
    task: str
    from_version: str | None
    from_hash: str
    to_version: str
    to_hash: str
    renames: dict[str, str]
    #: target step -> the step of the thread whose result it keeps (same name unless renamed)
    kept: dict[str, str]
    #: target steps that will run (no result on the target), in definition order
    will_run: list[str]
    #: steps of both definitions whose result is dropped (their dependencies changed)
    results_dropped: list[str]
    #: steps of the thread that the target does not have, and whether each had a result
    dropped: dict[str, bool]
    #: pending pauses kept as they are (target names)
    pauses_kept: list[str]
    #: pending pauses asked again (their plan changed, or a new step comes before them)
    pauses_reasked: list[str]
    #: pending pauses the target no longer has
    pauses_dropped: list[str]
    changes: list[str]
    refusals: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.refusals

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok}


#: computes the plan hash of a target approval on the migrated state (None: it has no plan,
#: or the plan cannot be computed yet)
PlanHash = Callable[[str, Mapping[str, Any]], str | None]


def _steps_of(summary: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for st in summary.get("stages", []) for s in st.get("steps", [])}


def compute_plan(
    *,
    thread_id: str,
    status: str,
    recorded: Mapping[str, Any],
    recorded_hash: str,
    results: set[str],
    requests: Mapping[str, Mapping[str, Any]],
    target: LongTask,
    renames: Mapping[str, str],
    held_by: str | None,
    new_plan_hash: PlanHash,
) -> MigrationPlan:
    """The plan (see the module docstring). ``results``: steps of the thread with a result;
    ``requests``: the recorded request of each pause of the thread (by its old name)."""
    old_steps = _steps_of(recorded)
    new_layout = target.layout
    refusals: list[str] = []
    for old, new in renames.items():
        if old not in old_steps:
            refusals.append(
                f"--map {old}={new}: the thread's definition has no step {old!r} "
                f"(it has {', '.join(old_steps) or 'none'})"
            )
        if new not in target.steps:
            refusals.append(
                f"--map {old}={new}: version {target.version} has no step {new!r} "
                f"(it has {', '.join(target.steps)})"
            )
        if new in old_steps and new not in renames:
            refusals.append(
                f"--map {old}={new}: the thread has a step {new!r} of its own; map that "
                "one too or choose another name"
            )
    if len(set(renames.values())) != len(renames):
        refusals.append("--map names one new step for several old ones")

    def new_name(old: str) -> str | None:
        name = renames.get(old, old)
        return name if name in target.steps else None

    # results carried to the target, before dependencies are checked
    carried = {n: old for old in results if (n := new_name(old)) is not None}
    kept = dict(carried)
    changed = True
    while changed:  # a kept result needs each of its dependencies kept (a fixpoint)
        changed = False
        for name in list(kept):
            if any(d not in kept for d in new_layout[name].depends_on):
                del kept[name]
                changed = True
    results_dropped = sorted(set(carried) - set(kept), key=list(target.steps).index)
    dropped = {old: old in results for old in old_steps if new_name(old) is None}
    will_run = [s for s in target.steps if s not in kept]

    pending = {old: req for old, req in requests.items() if old not in results}
    pauses_kept: list[str] = []
    pauses_reasked: list[str] = []
    pauses_dropped: list[str] = []
    for old, req in sorted(pending.items()):
        mapped = new_name(old)
        step = target.steps.get(mapped) if mapped is not None else None
        if mapped is None or not isinstance(step, PauseStep):
            pauses_dropped.append(old)
            hint = (
                f"map it to its new name with --map {old}=NEW"
                if mapped is None
                else f"step {mapped!r} is no approval or wait on the target"
            )
            refusals.append(
                f"pause {old!r} is pending and version {target.version} would drop it: the "
                f"thread would go on without the answer it waits for ({hint}, or answer it "
                "first)"
            )
            continue
        name = mapped
        if any(d not in kept for d in new_layout[name].depends_on):
            pauses_reasked.append(name)  # asked again once the new steps before it ran
        elif step.kind == "approval" and new_plan_hash(name, req) != req.get("plan_hash"):
            pauses_reasked.append(name)
        else:
            pauses_kept.append(name)

    # a removed step's result was an input a kept or re-run step declared
    for old, had in dropped.items():
        if not had:
            continue
        users = sorted(
            n
            for o, s in old_steps.items()
            if old in (s.get("after") or ()) and (n := new_name(o)) is not None
        )
        if users:
            refusals.append(
                f"step {old!r} is removed and its result would be lost, but "
                f"{', '.join(map(repr, users))} declared it as a dependency (after=); keep "
                f"{old!r} in version {target.version}, or map it onto a step with --map"
            )
    if status not in LIVE:
        refusals.append(f"thread {thread_id!r} is {status}: there is nothing to migrate")
    if recorded_hash == target.definition_hash:
        refusals.append(
            f"thread {thread_id!r} already runs on version {target.version} "
            f"({target.definition_hash})"
        )
    if held_by is not None:
        refusals.append(
            f"thread {thread_id!r} is held by {held_by} (it is running a step): migrate it "
            "when it has paused or stopped"
        )
    return MigrationPlan(
        thread_id=thread_id,
        task=target.name,
        from_version=recorded.get("version"),
        from_hash=recorded_hash,
        to_version=target.version,
        to_hash=target.definition_hash,
        renames=dict(renames),
        kept={k: kept[k] for k in target.steps if k in kept},
        will_run=will_run,
        results_dropped=results_dropped,
        dropped=dropped,
        pauses_kept=pauses_kept,
        pauses_reasked=pauses_reasked,
        pauses_dropped=pauses_dropped,
        changes=definition_changes(dict(recorded), definition_summary(target)),
        refusals=refusals,
    )
