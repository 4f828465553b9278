"""The Runner's reading methods: a thread's status, results, events, what it waits for and
its checkpoints (no run, no lock).

``history`` reads ``limit`` checkpoints through the reader's own ``list_light`` (LangGraph's
``get_state_history`` would load every checkpoint's state)."""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from longtask.checkpointers._reader import values_now
from longtask.errors import InvalidInput, ThreadNotFound
from longtask.runtime._costs import ThreadCost, with_costs
from longtask.runtime._interrupts import USER_KINDS, open_interrupts
from longtask.runtime._usage import ThreadUsage, read_usage
from longtask.runtime._views import (
    CheckpointView,
    HistoryList,
    InnerCheckpoint,
    Pending,
    StepState,
    ThreadStatus,
    step_layout,
)
from longtask.store import SKIP_MARK, Event, ThreadRecord, is_skipped

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

    from longtask.checkpointers import Database
    from longtask.model import LongTask
    from longtask.store import Effect, Store, ValueCodec

# This module imports no LangGraph and no task model: `longtask status` and the other reads
# use it in processes that never run a graph (see runtime._reader). So the step result
# channels are named here (`out.STEP`, steps._context.result_channel), and the modules that
# need LangGraph are imported where they are used.

#: the tick part of a fired thread's id (model._schedule.TICK_SUFFIX_RE, which a unit test
#: holds equal): a thread without one was started by no schedule, and needs no query
_TICK_SUFFIX_RE = re.compile(r"-(\d{8}T\d{4}Z)$")


def _config(thread_id: str, run: int | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if run is not None:
        from longtask.steps import RUN_KEY

        conf[RUN_KEY] = run
    return {"configurable": conf}


def _config_at(thread_id: str, checkpoint_id: str) -> dict[str, Any]:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint_id,
        }
    }


def view_of(
    tup: Any, stage_of: dict[str, str], out_channels: frozenset[str] | None = None
) -> CheckpointView:
    """``tup`` as a history line; ``stage_of``: each step's stage; ``out_channels``: every
    step's result channel (counted against the checkpoint's versions in C, not in a Python
    loop over the thousands of channels of a long task)."""
    meta = tup.metadata or {}
    updated = tup.checkpoint.get("updated_channels") or []
    completed = sorted(c[4:] for c in updated if c.startswith("out."))
    versions = tup.checkpoint.get("channel_versions") or {}
    if out_channels is None:
        out_channels = frozenset(c for c in versions if c.startswith("out."))
    return CheckpointView(
        checkpoint_id=tup.config["configurable"]["checkpoint_id"],
        parent_id=(tup.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
        step=meta.get("step"),
        source=meta.get("source"),
        created_at=tup.checkpoint.get("ts"),
        completed=completed,
        stages=sorted({stage_of[c] for c in completed if c in stage_of}),
        done=len(out_channels.intersection(versions)),
        total=len(stage_of),
    )


def schedule_of(store: Store, thread_id: str) -> dict[str, Any] | None:
    """Which schedule started the thread, the tick, and the schedule's next fire time
    (None for a thread no schedule started)."""
    if not _TICK_SUFFIX_RE.search(thread_id):
        return None  # not an id a tick gives: no query
    found = store.fire_of(thread_id)
    if found is None:
        return None
    name, tick = found
    rec = store.schedule_get(name)
    out: dict[str, Any] = {"name": name, "tick": tick.isoformat(), "registered": rec is not None}
    if rec is not None:
        out.update(
            timezone=rec.timezone,
            paused=rec.paused,
            next_fire_at=rec.next_fire_at.isoformat(),
            next_fire_local=rec.next_fire_local().isoformat(),
        )
    return out


def _committed_in(tup: Any) -> set[str]:
    """Steps whose result the checkpoint itself holds (not only its pending writes)."""
    if tup is None:
        return set()
    return {c[4:] for c in tup.checkpoint.get("channel_versions", {}) if c[:4] == "out."}


#: the task inputs' channel (steps.INPUTS_CHANNEL; not imported: no LangGraph here)
_INPUTS = "lt.inputs"
#: the run context's channel (steps.CONTEXT_CHANNEL)
_CONTEXT = "lt.context"


def _later(a: Any, b: Any) -> bool:
    """Whether channel version ``a`` is later than ``b`` (LangGraph's versions are ints, or
    strings that sort as they grow)."""
    try:
        return bool(a > b)
    except TypeError:
        return str(a) > str(b)


def _new_input(tup: Any) -> bool:
    """Whether the checkpoint's input was written after every step's result: a new run of
    a served LangGraph graph under way (``Runner.run_again``), whose results so far are
    the last run's."""
    versions = tup.checkpoint.get("channel_versions", {})
    given = versions.get(_INPUTS)
    results = [v for c, v in versions.items() if c[:4] == "out."]
    return given is not None and bool(results) and all(_later(given, v) for v in results)


def _done_in(tup: Any, committed: set[str] | None = None) -> set[str]:
    if tup is None:
        return set()
    done = set(_committed_in(tup) if committed is None else committed)
    done.update(c[4:] for _, c, _ in tup.pending_writes or () if c[:4] == "out.")
    return done


def _skipped_in(tup: Any) -> set[str]:
    if tup is None:
        return set()
    values = dict(tup.checkpoint.get("channel_values", {}))
    values.update({c: v for _, c, v in tup.pending_writes or ()})
    return {c[4:] for c, v in values.items() if c.startswith("out.") and is_skipped(v)}


def derived_status(
    rec: ThreadRecord,
    tup: Any,
    steps: list[StepState],
    active: bool,
    committed: set[str] | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """The thread's status and what it waits for, as its head checkpoint shows them.

    The Runner keeps the record up to date for the runs it makes; a thread advanced some
    other way (LangGraph's own ``invoke`` on ``runner.graph(task)``, or a process that died
    between its last checkpoint and its status write) is told by its checkpoint."""
    status, waiting = rec.status, rec.waiting or []
    if tup is None or status in ("completed", "cancelled", "cancelling") or active:
        return status, waiting
    # Completed only when the checkpoint itself holds every result: results still in pending
    # writes (a super-step cut off before its checkpoint) need a resume to finish it.
    if committed is None:
        committed = _committed_in(tup)
    if steps and all(s.name in committed for s in steps) and not _new_input(tup):
        return "completed", []
    if status == "running":
        pending = open_interrupts(tup)
        if pending:
            waiting = [p.summary() for p in pending]
            user = any(w["kind"] in USER_KINDS for w in waiting)
            return ("waiting_user" if user else "waiting_external"), waiting
    return status, waiting


class Reads:
    """The reads of a thread: its record, status, what it waits for, its checkpoints,
    results, events, effects and usage, and the list of threads. No run, no lock, no
    LangGraph (see the module docstring)."""

    def __init__(self, db: Database, codec: ValueCodec) -> None:
        self.db = db
        self.codec = codec

    def thread(self, thread_id: str) -> ThreadRecord:
        """The thread's record, or :class:`ThreadNotFound` naming the database."""
        rec = self.db.store.get_thread(thread_id)
        if rec is None:
            raise ThreadNotFound(thread_id, self.db.url.redacted)
        return rec

    def done_steps(self, thread_id: str) -> set[str]:
        """Steps whose result is in the latest checkpoint or in its pending writes."""
        return _done_in(self.db.reader.head(thread_id))

    def status(self, thread_id: str, *, usage: bool = True) -> ThreadStatus:
        """Status, progress, current stage and per-step states, from the thread record and
        the latest checkpoint only (no history walk, no task import); with ``usage`` (the
        default) what each step and the thread used, from one small row per step and the
        budget row (``usage=False`` skips them, for a caller that polls and shows none)."""
        rec = self.thread(thread_id)
        # Without the results: the fix loops' rounds, and the results that may be a skip's
        # mark ({"$longtask": "skipped", ...}), found by the server.
        tup = self.db.reader.head(thread_id, load="fix.", search=("out.", SKIP_MARK))
        committed = _committed_in(tup)
        done = _done_in(tup, committed)
        if tup is not None and _new_input(tup):
            # a served graph's new run under way: the results are the last run's
            committed = done = set()
        skipped = _skipped_in(tup)
        waiting = {w["step"]: w["kind"] for w in rec.waiting or ()}
        values: dict[str, Any] = dict(tup.checkpoint.get("channel_values", {})) if tup else {}
        rounds = {
            c[4:]: int(v["round"])
            for c, v in values.items()
            if c[:4] == "fix." and isinstance(v, dict) and v.get("round")
        }
        holder = self.db.store.lease_holder(thread_id) if rec.mode == "worker" else None
        active = rec.status == "running" and self._advanced(rec, holder)
        failed_step = (rec.error or {}).get("step") if rec.status == "failed" else None
        layout = step_layout(rec.definition)
        stopped = rec.status == "running" and not active
        totals, used = (
            read_usage(self.db.store, rec, layout.names, stopped=stopped) if usage else (None, {})
        )
        running = rec.status == "running"
        steps: list[StepState] = []
        current: str | None = None
        for name, stage, kind, depends_on in layout.steps:
            if name in skipped:
                state = "skipped"
            elif name in done:
                state = "completed"
            elif name in waiting:
                state = "waiting"
            elif name == failed_step:
                state = "failed"
            elif running and all(d in done for d in depends_on):
                state = "running"
            else:
                state = "pending"
            view = StepState.of(name, stage, kind, state, used.get(name))
            if kind == "map":
                progress = self.db.store.map_progress(thread_id, name)
                if progress is not None:
                    view.items_done = progress.done
                    view.items_total = progress.total
                    view.items_failed = progress.failed
            if name in rounds:
                view.fix_rounds = rounds[name]
            if state == "running" and active:
                view.progress = self.db.store.step_progress(thread_id, name)
            steps.append(view)
            if current is None and state != "completed" and state != "skipped":
                current = stage
        total = len(steps) or 1
        status, waiting_now = derived_status(rec, tup, steps, active, committed)
        if status != rec.status:
            # Told by the checkpoint: nothing runs, and the steps it waits for wait.
            waits = {w["step"] for w in waiting_now}
            for s in steps:
                if s.state in ("running", "pending"):
                    s.state = "waiting" if s.name in waits else "pending"
        return ThreadStatus(
            thread_id=rec.thread_id,
            task_name=rec.task_name,
            task_version=rec.task_version,
            task_ref=rec.task_ref,
            status=status,
            active=active,
            progress=round(sum(s.state in ("completed", "skipped") for s in steps) / total, 4),
            current_stage=current,
            steps=steps,
            error=rec.error,
            waiting=waiting_now,
            checkpoint_id=tup.config["configurable"]["checkpoint_id"] if tup else None,
            runs=rec.runs,
            created_at=rec.created_at,
            updated_at=rec.updated_at,
            worker=holder[0] if holder else None,
            **self._silence(holder[0] if holder and rec.status == "running" else None),
            schedule=schedule_of(self.db.store, thread_id),
            usage=totals,
            subtasks=self._children(thread_id),
            parent=self._parent(thread_id),
        )

    def _children(self, thread_id: str) -> dict[str, list[dict[str, Any]]]:
        """The thread's child threads, by sub-task step."""
        children: dict[str, list[dict[str, Any]]] = {}
        for row in self.db.store.subtask_rows(thread_id):
            children.setdefault(row.step, []).append(
                {
                    "index": row.index,
                    "attempt": row.attempt,
                    "thread_id": row.child,
                    "status": row.status or "pending",
                }
            )
        return children

    def _parent(self, thread_id: str) -> dict[str, Any] | None:
        """The sub-task step that started the thread, if one did."""
        up = self.db.store.subtask_of(thread_id)
        if up is None:
            return None
        return {"thread_id": up.parent, "step": up.step, "item": up.index, "attempt": up.attempt}

    def _advanced(self, rec: ThreadRecord, holder: tuple[str, int] | None) -> bool:
        """Whether a process advances the thread now. A worker holds a lease; a single
        process its writer lock (released when it dies, where its lease row stays until the
        next advance takes a new epoch)."""
        return holder is not None or self.db.is_locked(rec.thread_id)

    def _silence(self, worker: str | None) -> dict[str, float | None]:
        """How long the worker holding a running thread has been silent, if it missed its
        beats: a status that says only "held by" shows frozen progress as if it ran."""
        record = self.db.store.worker(worker) if worker else None
        if record is None:
            return {}
        silent = record.silent_for(time.time())
        if silent is None:
            return {}
        return {"worker_silent_for": round(silent, 1), "worker_stalled_after": record.stalled_after}

    def pending(self, thread_id: str, *, task: LongTask | None = None) -> list[Pending]:
        """What the thread is waiting for: approvals (with plan, hash, deadline, approvers)
        and outside events, each with the LangGraph interrupt id it answers. (``task`` is
        not needed: the requests are stored.)"""
        rec = self.thread(thread_id)
        if rec.status in ("failed", "completed", "cancelled"):
            # LangGraph keeps a task's last interrupt next to a later error (a rejection
            # that failed the thread): nothing is waiting for an answer any more.
            return []
        return open_interrupts(self.db.reader.head(thread_id))

    def history(
        self,
        thread_id: str,
        limit: int = 20,
        *,
        step: str | None = None,
        stage: str | None = None,
        before: str | None = None,
    ) -> list[CheckpointView]:
        """The latest ``limit`` checkpoints of the thread, newest first, across branches
        (``before``: older than that checkpoint, to page back). With ``step`` or ``stage``,
        only checkpoints that stored a result of that step (or of a step of that stage);
        the search reads at most 50 × ``limit`` checkpoints."""
        rec = self.thread(thread_id)
        if limit < 1:
            raise InvalidInput("limit must be at least 1")
        if before is not None and self.db.reader.get_tuple(_config_at(thread_id, before)) is None:
            # Else the page is silently the newest: nothing is older than an unknown id.
            raise InvalidInput(
                f"thread {thread_id!r} has no checkpoint {before!r}; see `longtask history "
                f"{shlex.quote(thread_id)}`"
            )
        wanted: set[str] | None = None
        names = {s["name"]: st["name"] for st in rec.definition["stages"] for s in st["steps"]}
        if step is not None or stage is not None:
            if step is not None and step not in names:
                raise InvalidInput(f"task {rec.task_name!r} has no step {step!r}")
            if stage is not None and stage not in names.values():
                raise InvalidInput(f"task {rec.task_name!r} has no stage {stage!r}")
            wanted = {n for n, st in names.items() if (step in (None, n)) and (stage in (None, st))}
        scan = limit if wanted is None else 50 * limit
        out: list[CheckpointView] = HistoryList()
        outs = frozenset(f"out.{n}" for n in names)
        for tup in self.db.reader.list_light(thread_id, before=before, limit=scan):
            view = view_of(tup, names, outs)
            if wanted is None or wanted & set(view.completed):
                out.append(view)
                if len(out) >= limit:
                    break
        return out

    def graph_ns(self, thread_id: str, step: str) -> str | None:
        """The checkpoint namespace of graph step ``step``'s latest run (its own graph's
        checkpoints), or None before it has run. Its ``step.started`` event names it; a
        thread pruned to its latest checkpoint has none left, and its graph's checkpoints
        stand in the step's own namespace, which they then name."""
        started = [e for e in self.events(thread_id, kinds=["step.started"]) if e.step == step]
        ns = next(
            (e.data["checkpoint_ns"] for e in reversed(started) if e.data.get("checkpoint_ns")),
            None,
        )
        if ns is None and self.db.reader.list_light(thread_id, limit=1, ns=step):
            return step
        return str(ns) if ns is not None else None

    def inner_history(self, thread_id: str, step: str, limit: int = 20) -> list[InnerCheckpoint]:
        """The latest ``limit`` checkpoints of graph step ``step``'s own graph (one per
        super-step of it), newest first, from its latest run."""
        rec = self.thread(thread_id)
        if limit < 1:
            raise InvalidInput("limit must be at least 1")
        kinds = {s["name"]: s.get("kind") for st in rec.definition["stages"] for s in st["steps"]}
        if kinds.get(step) != "graph":
            graphs = ", ".join(n for n, k in kinds.items() if k == "graph") or "none"
            raise InvalidInput(
                f"{step!r} is not a graph step of task {rec.task_name!r}; only a graph step "
                f"has checkpoints of its own (graph steps: {graphs})"
            )
        ns = self.graph_ns(thread_id, step)
        if ns is None:
            return []
        out = []
        for tup in self.db.reader.list_light(thread_id, limit=limit, ns=ns):
            meta = tup.metadata or {}
            out.append(
                InnerCheckpoint(
                    checkpoint_id=tup.config["configurable"]["checkpoint_id"],
                    parent_id=(tup.parent_config or {})
                    .get("configurable", {})
                    .get("checkpoint_id"),
                    step=meta.get("step"),
                    source=meta.get("source"),
                    created_at=tup.checkpoint.get("ts"),
                    updated=sorted(tup.checkpoint.get("updated_channels") or []),
                    checkpoint_ns=ns,
                )
            )
        return out

    def result(self, thread_id: str, step: str) -> Any:
        """The stored result of ``step`` in the thread's latest checkpoint."""
        rec = self.thread(thread_id)
        # only the step's channel (and any it is a prefix of): the other values may need
        # LangGraph's classes to decode
        tup = self.db.reader.head(thread_id, load=f"out.{step}")
        names = {s["name"] for st in rec.definition["stages"] for s in st["steps"]}
        if step not in names:
            raise InvalidInput(f"task {rec.task_name!r} has no step {step!r}")
        values = values_now(tup, f"out.{step}")
        if f"out.{step}" not in values:
            raise InvalidInput(f"step {step!r} of thread {thread_id!r} has no result yet")
        return self.codec.decode(values[f"out.{step}"], strict=False)

    def results(self, thread_id: str) -> dict[str, Any]:
        """Every stored step result of the thread, by step name."""
        self.thread(thread_id)
        tup = self.db.reader.head(thread_id, load="out.")
        return {
            k[4:]: self.codec.decode(v, strict=False) for k, v in values_now(tup, "out.").items()
        }

    def run_context(self, thread_id: str) -> dict[str, Any]:
        """The run context the thread's graph steps get now: what it was started with, or
        what its latest new input brought (``{}`` if none)."""
        rec = self.thread(thread_id)
        tup = self.db.reader.head(thread_id, load=_CONTEXT)
        value = values_now(tup, _CONTEXT).get(_CONTEXT) if tup is not None else None
        if value is None and tup is None:
            value = rec.context  # not run yet: what its first run will start with
        return dict(value) if isinstance(value, dict) else {}

    def events(
        self,
        thread_id: str,
        *,
        since: int = 0,
        kinds: Iterable[str] | None = None,
        limit: int | None = None,
    ) -> list[Event]:
        self.thread(thread_id)
        return self.db.store.events(
            thread_id, since=since, kinds=list(kinds) if kinds else None, limit=limit
        )

    def threads(self, limit: int = 100, status: str | None = None) -> list[ThreadRecord]:
        return self.db.store.list_threads(limit=limit, status=status)

    def effects(self, thread_id: str) -> list[Effect]:
        """The side-effect ledger of a thread, oldest first."""
        self.thread(thread_id)
        return self.db.store.effects(thread_id)

    def usage(self, thread_id: str) -> ThreadUsage:
        """What the thread used in all (tokens, cost, tool and model calls, wall time) and
        what its budget has left; the same as ``status(thread_id).usage``."""
        rec = self.thread(thread_id)
        declared = {s["name"] for st in rec.definition["stages"] for s in st["steps"]}
        return read_usage(self.db.store, rec, declared)[0]

    def threads_with_cost(
        self,
        limit: int = 100,
        status: str | None = None,
        sort: str = "updated",
        task: str | None = None,
        top: bool = False,
        visible_to: str | None = None,
        visible_meta: Mapping[str, str] | None = None,
    ) -> list[ThreadCost]:
        """Threads (with ``status``, of the task named ``task``) with what they cost and
        their age: ``sort`` is ``updated`` (most recently updated first), ``cost`` (most
        expensive first) or ``age`` (oldest first); with ``top`` only threads no sub-task
        step started; with ``visible_to`` only those that person owns or whose pending
        approval names them (``visible_meta``: see ``Store.list_threads``). Two queries,
        whatever the number of threads."""
        records = self.db.store.list_threads(
            limit=limit,
            status=status,
            sort=sort,
            task=task,
            top=top,
            visible_to=visible_to,
            visible_meta=visible_meta,
        )
        listed = with_costs(records, self.db.store.costs_of([r.thread_id for r in records]))
        # A running thread that no process advances (its process died or was stopped) says
        # so, as status does: a lock or lease check per running thread, none for the rest.
        for rec, item in zip(records, listed, strict=True):
            if rec.status == "running":
                holder = self.db.store.lease_holder(rec.thread_id) if rec.mode == "worker" else None
                item.active = self._advanced(rec, holder)
        return listed
