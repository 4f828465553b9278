"""The run core's side of sub-task steps: child threads made, run, and their end handed to
the parent.

A sub-task node (``steps._subtask``) records its children and pauses; this part makes each
child's thread record (adopting one that exists), has the children run, and, when a child
ends, continues the parent if every child of its step has ended:

- threads served by workers: the children are queued (one wake-up job each, so they run in
  parallel on the workers), and a child's end queues a wake-up of the parent. The child's
  job is not done until that wake-up is queued: a worker killed in between leaves the job
  to be run again (procrastinate gives a stalled job to another worker), which finds the
  child ended and queues the parent's wake-up then (``Worker._job`` calls ``ended``);
- a single process (SQLite, or PostgreSQL without workers): the children run in this
  process, one after another, once the parent's run has stopped at its pause, and then the
  parent continues. After a crash, resuming the parent (or any child) carries on: the
  parent's step starts the children that have not ended, and a child's end continues the
  parent.

A child's end is committed in one transaction with its status and its ``longtask.*`` end
event: that row is the outbox entry. Besides the fast paths above, ``sweep`` relays every
end a waiting parent has not acted on (``longtask tick``, and each worker as often as it
fires schedules, for the threads served by workers).

A parent's continuation is idempotent: its step reads its children's status again and
pauses again if one is still open, so a continuation delivered twice does nothing twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from longtask.errors import LongTaskError, ThreadExists
from longtask.model import LongTask, takes_context
from longtask.store._subtasks import ENDED, SubtaskRow

if TYPE_CHECKING:
    from longtask.checkpointers import Database
    from longtask.runtime._queue import Queue
    from longtask.runtime._reading import Reads
    from longtask.store import ThreadRecord, ValueCodec

log = logging.getLogger("longtask.runtime")

#: ``create(task, thread_id, encoded_inputs, task_ref, status, mode, owner, context)``: the
#: Engine's ``_create_record`` (ThreadExists if the id is taken)
Create = Callable[
    [LongTask, str, Any, str | None, str, str | None, str | None, dict[str, Any] | None],
    "ThreadRecord",
]


class Subtasks:
    """Child threads of sub-task steps, for one Engine (``ChildThreads`` of the nodes):
    ``validate`` checks a child's inputs, ``create`` stores a thread's record, ``resume``
    continues a thread (the Engine's)."""

    def __init__(
        self,
        db: Database,
        codec: ValueCodec,
        queue: Queue,
        reads: Reads,
        *,
        validate: Callable[[LongTask, Any], Any],
        create: Create,
        resume: Callable[..., Any],
    ) -> None:
        self._db = db
        self._codec = codec
        self._queue = queue
        self._reads = reads
        self._validate = validate
        self._create = create
        self._resume = resume
        #: children to run in this process once their parent's run has stopped
        self._due: dict[str, list[tuple[str, LongTask]]] = {}
        #: children this process is running for a parent that continues after them
        self._driving: set[str] = set()
        #: the task of each thread run here, to continue a parent with its own object
        self._tasks: dict[str, LongTask] = {}
        self._lock = threading.Lock()

    @property
    def _store(self) -> Any:
        return self._db.store

    # -- what a sub-task node calls -----------------------------------------------------------

    def check_inputs(self, task: LongTask, inputs: Any) -> Any:
        return self._validate(task, inputs)

    def spawn(self, row: SubtaskRow, task: LongTask) -> None:
        store = self._store
        if row.status is None:
            parent = store.get_thread(row.parent)
            inputs = json.loads(row.inputs) if row.inputs else None
            encoded = self._codec.encode(inputs, "the sub-task's inputs")
            # As a LangGraph subgraph shares its parent's runtime context, a child whose
            # graph steps read one starts with its parent's.
            context = (
                self._reads.run_context(row.parent)
                if parent is not None and takes_context(task.steps.values())
                else None
            )
            with contextlib.suppress(ThreadExists):  # made by an earlier entry: adopted
                # A child belongs to whoever owns its parent: they see and answer it.
                self._create(
                    task,
                    row.child,
                    encoded,
                    None,
                    "pending",
                    parent.mode if parent else None,
                    parent.owner if parent else None,
                    context or None,
                )
        # Idempotent by its key: told once even if a crash came between record and event.
        store.append_event(
            row.child,
            "longtask.started",
            key="longtask.started",
            data={
                "task": task.name,
                "version": task.version,
                "hash": task.definition_hash,
                "parent": {
                    "thread_id": row.parent,
                    "step": row.step,
                    "item": row.index,
                    "attempt": row.attempt,
                },
            },
        )

    def launch(self, parent: str, children: list[str], task: LongTask) -> None:
        rec = self._store.get_thread(parent)
        if rec is not None and rec.mode == "worker":
            for child in children:
                self._queue.wake(child)
            return
        with self._lock:
            due = self._due.setdefault(parent, [])
            known = {c for c, _ in due}
            due.extend((c, task) for c in children if c not in known)

    def result(self, child: str, step: str) -> Any:
        return self._reads.result(child, step)

    def error(self, child: str) -> dict[str, Any]:
        rec = self._store.get_thread(child)
        return dict(rec.error or {}) if rec is not None else {}

    # -- around runs ----------------------------------------------------------------------------

    def running(self, thread_id: str, task: LongTask) -> None:
        """A run of ``thread_id`` starts in this process, on ``task``."""
        with self._lock:
            self._tasks[thread_id] = task

    def after_run(self, thread_id: str, *, failed: bool) -> None:
        """A run of ``thread_id`` ended (``failed``: with an exception). Runs the children
        its step left to this process, then continues it; continues its own parent if it
        was the last child to end."""
        with self._lock:
            due = self._due.pop(thread_id, [])
            if not due:
                # Kept only while this process may continue the thread after its
                # children: a long-lived process would otherwise hold every task it ran.
                self._tasks.pop(thread_id, None)
        if due and not failed:
            for child, task in due:
                self._drive(child, task)
            # Only once a step's children have all ended: a child that could not run (held
            # by a process that died a moment ago) leaves the parent waiting, not looping.
            if self._all_ended(thread_id):
                self.continue_parent(thread_id, quiet=False)
        self.ended(thread_id)

    def _all_ended(self, parent: str) -> bool:
        """Whether a sub-task step ``parent`` waits at has no child left open."""
        rec = self._store.get_thread(parent)
        steps = {w.get("step") for w in (rec.waiting or []) if w.get("kind") == "subtask"}
        return any(self._step_ended(parent, str(step)) for step in steps) if rec else False

    def _step_ended(self, parent: str, step: str) -> bool:
        latest: dict[int, SubtaskRow] = {r.index: r for r in self._store.subtask_rows(parent, step)}
        return all(r.status in ENDED for r in latest.values())

    def _drive(self, child: str, task: LongTask) -> None:
        with self._lock:
            if child in self._driving:
                return
            self._driving.add(child)
        try:
            rec = self._store.get_thread(child)
            if rec is not None and rec.status in ("pending", "running"):
                self._resume(child, task=task)
        except LongTaskError as exc:
            # Recorded in the child's thread; the parent's step reads it from there.
            log.info("sub-task %s stopped: %s", child, exc)
        finally:
            with self._lock:
                self._driving.discard(child)

    def ended(self, thread_id: str) -> None:
        """If ``thread_id`` is a child that has ended and every child of its parent's step
        has ended, continue the parent (queued for a worker, or here)."""
        with self._lock:
            if thread_id in self._driving:
                return  # the parent's own run drives it and continues the parent after
        row = self._store.subtask_of(thread_id)
        if row is None or row.status not in ENDED or not self._step_ended(row.parent, row.step):
            return
        self.continue_parent(row.parent, quiet=True)

    def continue_parent(self, parent: str, *, quiet: bool) -> None:
        """Resume ``parent`` at its sub-task pause. ``quiet``: its failure is logged, not
        raised (the caller advanced a child, not the parent)."""
        rec = self._store.get_thread(parent)
        if rec is None or rec.status in ("completed", "cancelled", "cancelling"):
            return
        if rec.mode == "worker":
            # Queued whatever the parent's status: a parent still in the run that launched
            # this child gets the wake-up after that run (one job per thread at a time).
            self._queue.wake(parent)
            return
        if not any(w.get("kind") == "subtask" for w in rec.waiting or []):
            return
        with self._lock:
            task = self._tasks.get(parent)
        try:
            self._resume(parent, task=task)
        except LongTaskError as exc:
            if not quiet:
                raise
            log.info("parent %s stopped: %s", parent, exc)

    def sweep(
        self, limit: int = 100, thread_id: str | None = None, *, workers: bool = False
    ) -> list[tuple[str, str]]:
        """Continue every parent that still waits at a sub-task step whose children have
        all ended: a continuation lost with a process killed between a child's end and the
        parent's resume. A child's end is committed with its status and its
        ``longtask.completed``/``failed``/``cancelled`` event in one transaction, so this
        finds every end a parent has not acted on. ``longtask tick`` runs it, and every
        worker, for the threads served by workers (``workers``), as often as it fires
        schedules. Returns (parent, step) of each."""
        done = []
        for parent in self._store.subtask_parents_waiting(limit, thread_id, workers=workers):
            rec = self._store.get_thread(parent)
            steps = [
                str(w.get("step"))
                for w in (rec.waiting or [] if rec else [])
                if w.get("kind") == "subtask"
            ]
            ended = [s for s in steps if self._step_ended(parent, s)]
            if ended:
                self.continue_parent(parent, quiet=True)
                done.append((parent, ended[0]))
        return done
