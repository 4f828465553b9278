"""Moving a thread to another definition of its task (:class:`Migrations`, ``Runner.migrate``),
checked and recorded.

The plan comes from ``_migrate_plan`` (read-only). A real migration holds the thread's
writer lock, computes the plan again on a fresh read and refuses what the plan refuses, with
nothing written. Otherwise it writes one new checkpoint on the target graph, a child of the
thread's head: the kept results under their (new) channels, pending pauses' requests, the
dropped results cleared, and as the next tasks exactly the target steps whose dependencies
all have results (a kept pending pause at its ask node, so the plan-hash rule decides there
whether its request still stands). The ``definition.migrated`` event, with the plan and who
moved it, commits in that checkpoint's transaction (it waits in the event outbox, which the
saver's next write of the thread carries), and so does the thread record's new hash,
summary and reference (``saver.with_put``): a crash leaves the thread moved or not, never
half.

A thread that was paused is then advanced (or queued for a worker) until it pauses again:
LangGraph's interrupts belong to the checkpoint that raised them, so each pending pause asks
again on the new checkpoint — an approval with an unchanged plan shows the same request.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from longtask.errors import InvalidInput, MigrationRefused, ThreadBusy
from longtask.model import ApprovalStep, LongTask, PauseStep
from longtask.model._decision import plan_hash
from longtask.ops._migrate_plan import LIVE, MigrationPlan, compute_plan
from longtask.runtime._views import definition_summary
from longtask.store._store import definition_statement
from longtask.store._usage import usage_rename_statements

if TYPE_CHECKING:
    from longtask.checkpointers import Database
    from longtask.runtime import Engine, Queue, Reads
    from longtask.store import EventWriter, ThreadRecord

_OUT, _PAUSE = "out.", "pause."


def _state(mig: Migrations, thread_id: str) -> tuple[Any, dict[str, Any]]:
    """The head checkpoint tuple, and its values with the results of steps that finished
    in a super-step that failed as a whole (pending writes)."""
    tup = mig.db.saver.get_tuple({"configurable": {"thread_id": thread_id}})
    if tup is None:
        return None, {}
    values = dict(tup.checkpoint.get("channel_values", {}))
    values.update({c: v for _, c, v in tup.pending_writes or () if c.startswith(_OUT)})
    return tup, values


def _holder(mig: Migrations, thread_id: str) -> str | None:
    """Who advances the thread now, if anyone: a process holding its writer lock, or a
    worker holding its lease (an unreleased lease of a process is one that died)."""
    if mig.db.is_locked(thread_id):
        return "another process"
    held = mig.db.store.lease_holder(thread_id)
    if held is not None and not held[0].startswith("process:"):
        return f"worker {held[0]}"
    return None


def _target(mig: Migrations, rec: ThreadRecord, to: LongTask | str) -> LongTask:
    if isinstance(to, LongTask):
        if to.name != rec.task_name:
            raise InvalidInput(
                f"thread {rec.thread_id!r} runs task {rec.task_name!r}; cannot migrate it to "
                f"task {to.name!r}"
            )
        return to
    from longtask.runtime._taskref import load_versions

    if not rec.task_ref:
        raise InvalidInput(
            f"thread {rec.thread_id!r} has no task reference: pass the target LongTask itself"
        )
    family = load_versions(rec.task_ref)
    found = family.by_version(str(to))
    if found is None:
        known = ", ".join(t.version for t in family)
        raise InvalidInput(
            f"task {family.name!r} ({rec.task_ref}) has no version {to!r}; the code has {known}"
        )
    return found


def _plan_hasher(mig: Migrations, thread_id: str, target: LongTask, state: dict[str, Any]) -> Any:
    from longtask.steps._call import NodeCall

    env, _graph = mig.engine.compiled(target)

    def compute(step: str, req: Mapping[str, Any]) -> str | None:
        kind = target.steps[step]
        if not isinstance(kind, ApprovalStep) or kind.plan is None:
            return plan_hash(None)
        try:
            ctx = env.context(NodeCall(thread_id, 0, "migrate"), target.layout[step], state)
            plan = kind.plan(ctx)
            return plan_hash(env.codec.decode(env.codec.encode(plan, "the plan")))
        except Exception:
            return None  # it cannot be computed on what is kept: asked again

    return compute


def _mapped_values(
    values: Mapping[str, Any], plan: MigrationPlan, target: LongTask
) -> dict[str, Any]:
    """The target's channel values: inputs, kept results and pending pauses' requests."""
    out: dict[str, Any] = {}
    if "lt.inputs" in values:
        out["lt.inputs"] = values["lt.inputs"]
    for new, old in plan.kept.items():
        out[_OUT + new] = values[_OUT + old]
    back = {v: k for k, v in plan.renames.items()}
    for name, step in target.steps.items():
        if not isinstance(step, PauseStep) or name in plan.kept:
            continue
        req = values.get(_PAUSE + back.get(name, name))
        if isinstance(req, dict) and name in plan.pauses_kept + plan.pauses_reasked:
            out[_PAUSE + name] = {**req, "step": name}
    return out


def _ref(rec: ThreadRecord, target: LongTask) -> str | None:
    """The reference the migrated thread is loaded by: its own when that still has the
    target, else the target's own (None: keep the old one)."""
    from longtask.runtime._taskref import find_ref, load_versions

    if rec.task_ref:
        try:
            if load_versions(rec.task_ref).by_hash(target.definition_hash) is not None:
                return None
        except Exception:  # the old reference no longer loads: look for the target's
            pass
    return find_ref(target)


def plan_for(
    mig: Migrations,
    thread_id: str,
    to: LongTask | str,
    renames: Mapping[str, str] | None = None,
    *,
    held_by: str | None = None,
) -> tuple[MigrationPlan, LongTask, Any, dict[str, Any]]:
    rec = mig.reads.thread(thread_id)
    target = _target(mig, rec, to)
    tup, values = _state(mig, thread_id)
    results = {c[len(_OUT) :] for c in values if c.startswith(_OUT)}
    requests = {
        c[len(_PAUSE) :]: v
        for c, v in values.items()
        if c.startswith(_PAUSE) and isinstance(v, dict)
    }
    mapped = dict(renames or {})
    provisional = {_OUT + mapped.get(s, s): values[_OUT + s] for s in results} | {
        "lt.inputs": values.get("lt.inputs", {})
    }
    plan = compute_plan(
        thread_id=thread_id,
        status=rec.status,
        recorded=rec.definition,
        recorded_hash=rec.definition_hash,
        results=results,
        requests=requests,
        target=target,
        renames=mapped,
        held_by=held_by,
        new_plan_hash=_plan_hasher(mig, thread_id, target, provisional),
    )
    return plan, target, tup, values


def _new_request(
    mig: Migrations, thread_id: str, target: LongTask, step: str, state: dict[str, Any]
) -> dict[str, Any]:
    """A fresh request of a re-asked pause, made now by the target's own request node (its
    ``approval.required`` event commits with the migration). Were the request node left to
    the next run, it would wait behind every other pause of its super-step: LangGraph ends a
    super-step only when all its tasks are done, and a pending pause is not."""
    from longtask.steps import RUN_KEY, pause_nodes

    env, _graph = mig.engine.compiled(target)
    kind = target.steps[step]
    assert isinstance(kind, PauseStep)
    request = pause_nodes(kind, target.layout[step], env)[0]
    rec = mig.reads.thread(thread_id)
    config: Any = {
        "configurable": {"thread_id": thread_id, RUN_KEY: rec.runs},
        "metadata": {"langgraph_checkpoint_ns": f"{step}.request:migrate-{uuid.uuid4().hex}"},
    }
    update: dict[str, Any] = request(state, config)
    return update


def _write(
    mig: Migrations, plan: MigrationPlan, target: LongTask, tup: Any, values: Any, by: str
) -> None:
    """The new checkpoint (see the module docstring), with the event in its transaction."""
    from langgraph.checkpoint.base import copy_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    from longtask.graphs import entry_node
    from longtask.steps import ask_node_name
    from longtask.store import NewEvent

    saver = mig.db.saver
    head = tup.checkpoint
    cp = copy_checkpoint(head)
    versions: dict[str, Any] = dict(cp["channel_versions"])
    top = max((saver.get_next_version(v, None) for v in versions.values()), default=None)
    version = top or saver.get_next_version(None, None)
    new_values = _mapped_values(values, plan, target)
    for step in plan.pauses_reasked:
        if all(d in plan.kept for d in target.layout[step].depends_on):
            new_values.update(_new_request(mig, plan.thread_id, target, step, new_values))
    # Every channel the head has a value in is cleared (a new version without a value)
    # unless the target keeps it: a dropped result, an old step's trigger, a join's count.
    cleared = [c for c in head.get("channel_values", {}) if c not in new_values]
    frontier = []
    for step in plan.will_run:
        if all(d in plan.kept for d in target.layout[step].depends_on):
            pending_pause = step in plan.pauses_kept or step in plan.pauses_reasked
            # (a re-asked one has its fresh request by now)
            frontier.append(
                ask_node_name(step)
                if pending_pause and _PAUSE + step in new_values
                else entry_node(target, step)
            )
        elif len(deps := target.layout[step].depends_on) > 1:
            # a join some of whose sources have results: LangGraph's barrier counts them
            done = {d for d in deps if d in plan.kept}
            if done:
                new_values[f"join:{'+'.join(deps)}:{entry_node(target, step)}"] = done
    for node in frontier:
        new_values[f"branch:to:{node}"] = None
    changed = {c for c in new_values if head.get("channel_values", {}).get(c, ...) != new_values[c]}
    changed |= {c for c in new_values if c.startswith("branch:to:")}
    new_versions: dict[str, str | int | float] = {
        c: version for c in sorted(changed | set(cleared))
    }
    versions.update(new_versions)
    cp["channel_versions"] = versions
    cp["channel_values"] = new_values
    cp["id"] = str(uuid6(clock_seq=-2))
    cp["ts"] = datetime.now(UTC).isoformat()
    cp["updated_channels"] = sorted(new_versions)
    meta = dict(tup.metadata or {})
    metadata: Any = {
        "source": "update",
        "step": int(meta.get("step", 0)) + 1,
        "parents": {},
        "longtask_migrated": plan.to_hash,
    }
    mig.events.put(
        NewEvent(
            plan.thread_id,
            "definition.migrated",
            key=f"definition.migrated/{uuid.uuid4().hex}",
            data={"by": by, "plan": plan.to_json()},
        )
    )
    config: Any = {
        "configurable": {
            "thread_id": plan.thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": head["id"],
        }
    }
    saver.put(config, cp, metadata, new_versions)


def migrate(
    mig: Migrations,
    thread_id: str,
    to: LongTask | str,
    *,
    renames: Mapping[str, str] | None = None,
    dry_run: bool = False,
    by: str,
    task_ref: str | None = None,
) -> MigrationPlan:
    """See ``Runner.migrate``."""
    if not by or not by.strip():
        raise InvalidInput("say who migrates the thread: by=NAME (--by NAME)")
    if dry_run:
        return mig.plan(thread_id, to, renames)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(mig.db.lock(thread_id))
        except ThreadBusy:
            plan = plan_for(mig, thread_id, to, renames, held_by="another process")[0]
            raise MigrationRefused(plan) from None
        # A single process holds the writer lock as well as its lease (an unreleased lease
        # of a process is one that died); a worker holds only the lease.
        held = mig.db.store.lease_holder(thread_id)
        worker = f"worker {held[0]}" if held and not held[0].startswith("process:") else None
        plan, target, tup, values = plan_for(mig, thread_id, to, renames, held_by=worker)
        if not plan.ok or tup is None:
            raise MigrationRefused(plan)
        rec = mig.reads.thread(thread_id)
        statements = [
            definition_statement(
                thread_id,
                target.definition_hash,
                definition_summary(target),
                task_ref or _ref(rec, target),
            )
        ]
        statements += usage_rename_statements(thread_id, plan.renames)
        paused = rec.status in ("waiting_user", "waiting_external")
        if paused:
            # its pauses are asked again by the advance below: until then it waits for none
            statements.append(
                (
                    "UPDATE longtask_threads SET status = 'pending', waiting = NULL, "
                    "updated_at = ? WHERE thread_id = ?",
                    (time.time(), thread_id),
                )
            )
        with mig.queue.lease(thread_id, "process:migrate"):
            # the record's new hash commits in the checkpoint's transaction, with the event
            mig.db.saver.with_put(thread_id, statements)
            _write(mig, plan, target, tup, values, by)
    if paused:
        mig.engine.resume(thread_id, task=target)
    return plan


class Migrations:
    """Moving threads to another definition of their task: ``migrate`` one, or
    ``migrate_all`` of a version. Built on the run core: ``reads`` (records), ``engine``
    (the target's graph and step environment, and the resume after the move), ``queue``
    (the lease the write is fenced by) and ``events`` (the outbox the record rides in)."""

    def __init__(
        self, db: Database, events: EventWriter, reads: Reads, engine: Engine, queue: Queue
    ) -> None:
        self.db = db
        self.events = events
        self.reads = reads
        self.engine = engine
        self.queue = queue

    def plan(
        self, thread_id: str, to: LongTask | str, renames: Mapping[str, str] | None = None
    ) -> MigrationPlan:
        """The plan of a migration of the thread to ``to``, as the thread stands now (held
        or not): what a dry run and ``longtask check`` show. Reads only."""
        return plan_for(self, thread_id, to, renames, held_by=_holder(self, thread_id))[0]

    def migrate(
        self,
        thread_id: str,
        to: LongTask | str,
        *,
        renames: Mapping[str, str] | None = None,
        dry_run: bool = False,
        by: str,
        task_ref: str | None = None,
    ) -> MigrationPlan:
        """Move the thread to definition ``to`` (a LongTask, or a version of its task's
        reference) and return the plan. ``renames`` maps old step names to new ones. With
        ``dry_run`` nothing is written. A plan with refusals raises
        :class:`~longtask.errors.MigrationRefused` (naming each reason) and changes nothing;
        else one new checkpoint and a ``definition.migrated`` event commit together, and a
        paused thread asks its pending pauses again on the new definition. ``task_ref``:
        the reference the thread is loaded by from now on (default: its own when that has
        ``to``, else the one ``to`` is found by)."""
        return migrate(
            self, thread_id, to, renames=renames, dry_run=dry_run, by=by, task_ref=task_ref
        )

    def migrate_all(
        self,
        task_ref: str,
        from_version: str,
        to: str,
        *,
        renames: Mapping[str, str] | None = None,
        dry_run: bool = False,
        by: str,
    ) -> list[MigrationPlan]:
        """``migrate`` every live thread of ``task_ref``'s task recorded on ``from_version``
        to its version ``to`` (loaded by ``task_ref`` from then on); one plan per thread (a
        refused one is returned with its refusals, not raised)."""
        from longtask.runtime._taskref import load_versions

        family = load_versions(task_ref)
        source = family.by_version(from_version)
        target = family.by_version(to)
        known = ", ".join(t.version for t in family)
        if target is None:
            raise InvalidInput(f"task {family.name!r} has no version {to!r}; the code has {known}")
        plans: list[MigrationPlan] = []
        for rec in self.db.store.live_threads(family.name):
            if rec.status not in LIVE:
                continue
            if source is not None and rec.definition_hash != source.definition_hash:
                continue
            if source is None and rec.definition.get("version") != from_version:
                continue
            try:
                plans.append(
                    migrate(
                        self,
                        rec.thread_id,
                        target,
                        renames=renames,
                        dry_run=dry_run,
                        by=by,
                        task_ref=task_ref,
                    )
                )
            except MigrationRefused as exc:
                plans.append(exc.plan)
        return plans
