"""Gotos: a ``Command(goto=...)`` (``resume --goto``, a Server API run with a command) of a
finished thread is refused (fork it), one that would jump past an approval or a wait is
refused, or with ``skip_pending`` let through, and every goto carried out is recorded with
who asked. Checked by the run core before a resume and by ``serve`` before it answers."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from longtask.errors import InvalidInput
from longtask.model import PauseStep
from longtask.runtime._gate import check_status
from longtask.runtime._interrupts import open_interrupts
from longtask.runtime._who import whoami

if TYPE_CHECKING:
    from longtask.checkpointers import Database
    from longtask.model import LongTask
    from longtask.runtime._reading import Reads
    from longtask.runtime._views import Pending
    from longtask.store import ThreadRecord


class Gotos:
    """The goto checks of threads in ``db``; ``reads`` says which steps have results."""

    def __init__(self, db: Database, reads: Reads) -> None:
        self.db = db
        self._reads = reads

    def check(
        self,
        rec: ThreadRecord,
        task: LongTask,
        goto: list[str],
        *,
        skip_pending: bool,
        by: str | None,
        record: bool,
    ) -> None:
        """Refuse a ``goto`` of a finished thread (fork it instead), and one that would jump
        past a pending approval or wait (one that comes before a target): the gated step
        would run before any decision, and again after it; with ``skip_pending`` that one
        goes on. With ``record`` (the goto is carried out now) a ``manual.goto`` event says
        who asked for it and what it skipped."""
        if not goto:
            return
        # A goto runs steps again: an outside write, refused on a finished thread as every
        # other is (the gate's rule: fork it instead).
        check_status(rec, "goto")
        if not skip_pending:
            self._refuse_unanswered(rec, task, goto)
        skipped = [] if rec.status == "failed" else self._skipped(rec, task, goto)
        if skipped and not skip_pending:
            first = skipped[0]
            target = next(g for g in goto if first.step in task.layout[g].ancestors)
            answer = (
                f"longtask approve {rec.thread_id} {first.step} --by NAME"
                if first.kind == "approval"
                else f"longtask signal {rec.thread_id} {first.step} --payload JSON"
            )
            what = "approval" if first.kind == "approval" else "wait"
            raise InvalidInput(
                f"cannot go to {target!r}: it comes after the pending {what} {first.step!r}, "
                f"which would be skipped; answer it first (`{answer}`), or go anyway with "
                "--skip-pending (skip_pending=True)"
            )
        if record:
            # Every goto carried out is recorded with who asked (what it skipped, if any).
            self.db.store.append_event(
                rec.thread_id,
                "manual.goto",
                key=f"manual.goto/{uuid.uuid4().hex}",
                data={
                    "by": by or whoami(),
                    "goto": goto,
                    "skipped_pending": [p.step for p in skipped],
                },
            )

    def _skipped(self, rec: ThreadRecord, task: LongTask, goto: list[str]) -> list[Pending]:
        """The pending approvals and waits that come before a target of ``goto``."""
        return [
            p
            for p in open_interrupts(self.db.saver.head(rec.thread_id))
            if p.kind in ("approval", "wait")
            and any(p.step in task.layout[g].ancestors for g in goto if g in task.layout)
        ]

    def _refuse_unanswered(self, rec: ThreadRecord, task: LongTask, goto: list[str]) -> None:
        """Refuse a ``goto`` to a step after an approval or a wait that has no answer and is
        not pending now (not reached yet, or it failed the thread): the gated step would run
        with no decision at all. (A pending one is refused by ``check``, with the
        command that answers it.)"""
        pending = {p.step for p in open_interrupts(self.db.saver.head(rec.thread_id))}
        done = self._reads.done_steps(rec.thread_id)
        for target in goto:
            info = task.layout.get(target)
            if info is None:
                continue
            for name in sorted(info.ancestors):
                step = task.steps.get(name)
                if isinstance(step, PauseStep) and name not in done and name not in pending:
                    what = "approval" if step.kind == "approval" else "wait"
                    raise InvalidInput(
                        f"cannot go to {target!r}: it comes after the {what} {name!r}, which "
                        "has no answer, so the step would run without it; go to "
                        f"{name!r} instead (it asks again), or go anyway with --skip-pending "
                        "(skip_pending=True, recorded with --by)"
                    )
