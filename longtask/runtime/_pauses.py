"""The Runner's side of pauses: what a thread waits for, and answering it.

Every answer is checked here, against the pending request, before anything is handed to
LangGraph: a wrong plan hash, an approver who may not decide, a passed deadline, a payload
that does not match its schema or a step that is not waiting is an error, and the thread's
state is left exactly as it was.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from langgraph.types import Command
from pydantic import ValidationError

from longtask.errors import (
    InvalidInput,
    LongTaskError,
    StepFailed,
    ThreadBusy,
    describe_validation,
)
from longtask.model import ApprovalRequest, Decision, LongTask, PauseStep, WaitStep
from longtask.runtime._base import RunnerBase
from longtask.runtime._control import whoami
from longtask.runtime._interrupts import GATE_KINDS, open_interrupts
from longtask.runtime._streams import check_config, using_config
from longtask.runtime._text import refuse_bad_text
from longtask.runtime._views import Pending
from longtask.steps import TIMEOUT, check_decision, check_payload
from longtask.steps._effects import RESOLVED_AS_FAILED
from longtask.steps._hitl import decision_from_hitl, is_hitl
from longtask.steps._pause import signal_value
from longtask.store import Effect
from longtask.store._values import to_json_bytes

if TYPE_CHECKING:
    from longtask.store import ThreadRecord


#: the answer ``resume`` (and ``retry``) gives a gate: look again
GATE_ANSWER = {"continue": True}


class NotWaiting(InvalidInput):
    """The answer came too late: the thread stopped waiting for it (another process answered
    it, a deadline failed the thread, or the thread ended) before this answer could be used."""


def refuse_repeated_outcome(rec: ThreadRecord) -> None:
    """A thread that failed because an approval was rejected or a pause timed out: going on
    from its checkpoint (with or without a command) would run the pause again with the same
    answer and repeat that outcome; ``retry`` asks again."""
    error = rec.error or {}
    outcome, step = error.get("outcome"), error.get("step")
    if outcome and step:
        raise InvalidInput(
            f"step {step!r} of thread {rec.thread_id!r} "
            f"{'was rejected' if outcome == 'rejected' else outcome}; resuming would only "
            f"repeat that. To ask again (a fresh request), run `longtask retry "
            f"{rec.thread_id} {step}`"
        )


@dataclass
class TickResult:
    thread_id: str
    step: str
    outcome: str  # "timed out", "failed", "busy", "not waiting"


class PauseMixin(RunnerBase):
    """Runner's pause methods: pending, approve, reject, decide, signal, answer, tick."""

    def _select(
        self, thread_id: str, task: LongTask, target: str | None, kind: str | None
    ) -> Pending:
        rec = self._thread(thread_id)
        items = [p for p in self.pending(thread_id, task=task) if kind is None or p.kind == kind]
        what = {"approval": "an approval", "wait": "an outside event"}.get(kind or "", "an answer")
        if not items:
            raise InvalidInput(
                f"thread {thread_id!r} is not waiting for {what} (status: {rec.status})"
            )
        if target is None:
            if len(items) > 1:
                names = ", ".join(p.step for p in items)
                raise InvalidInput(
                    f"thread {thread_id!r} waits for several answers ({names}); name the step"
                )
            return items[0]
        for p in items:
            if target in (p.step, p.interrupt_id):
                return p
        names = ", ".join(p.step for p in items)
        raise InvalidInput(
            f"{target!r} of thread {thread_id!r} is not waiting for {what}; waiting: {names}"
        )

    def _goto_skips(
        self,
        rec: ThreadRecord,
        task: LongTask,
        goto: list[str],
        *,
        skip_pending: bool,
        by: str | None,
        record: bool,
    ) -> None:
        """Refuse a ``goto`` that would jump past a pending approval or wait (one that comes
        before a target): the gated step would run before any decision, and again after it.
        With ``skip_pending`` it goes on, and (``record``) a ``manual.goto`` event says who
        skipped what."""
        if not goto:
            return
        if not skip_pending:
            self._refuse_unanswered(rec, task, goto)
        if rec.status in ("failed", "completed", "cancelled"):
            return
        skipped = [
            p
            for p in open_interrupts(self.db.saver.head(rec.thread_id))
            if p.kind in ("approval", "wait")
            and any(p.step in task.layout[g].ancestors for g in goto if g in task.layout)
        ]
        if not skipped:
            return
        if not skip_pending:
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

    def _refuse_unanswered(self, rec: ThreadRecord, task: LongTask, goto: list[str]) -> None:
        """Refuse a ``goto`` to a step after an approval or a wait that has no answer and is
        not pending now (not reached yet, or it failed the thread): the gated step would run
        with no decision at all. (A pending one is refused by ``_goto_skips``, with the
        command that answers it.)"""
        pending = {p.step for p in open_interrupts(self.db.saver.head(rec.thread_id))}
        done = self._done_steps(rec.thread_id)
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

    def _answer(
        self, thread_id: str, task: LongTask, item: Pending, value: Any, by: str | None = None
    ) -> Any:
        """The checked resume value for ``item`` (raises InvalidInput, changing nothing)."""
        refuse_bad_text(value, "the answer")
        refuse_bad_text(by, "the name it is answered by")
        if item.kind == "effect":
            raise InvalidInput(
                f"step {item.step!r} waits for a person to settle effect {item.request['key']}: "
                f"use `longtask effects resolve {thread_id} {item.request['key']} "
                "--succeeded [--result JSON] | --failed | --retry`"
            )
        if item.kind in GATE_KINDS:
            # Any value: the step looks again (and pauses again if it is still blocked).
            return value if value is not None else GATE_ANSWER
        if item.kind == "approval":
            request = ApprovalRequest.model_validate(item.request)
            # A HITL answer names nobody: it is recorded as decided by whom the caller
            # vouches for (an HTTP API: the token's actor), else this process's user.
            value = decision_from_hitl(request, value, self.clock(), by=by or whoami())
            decision = check_decision(request, value, self.clock(), step=item.step)
            return decision.model_dump(mode="json")
        step = task.steps[item.step]
        assert isinstance(step, WaitStep)
        return check_payload(step, value)

    def _resume_pending(
        self,
        thread_id: str,
        task: LongTask,
        item: Pending,
        value: Any,
        allow_changed_definition: bool = False,
    ) -> str:
        """Continue the thread with ``value`` for ``item``, if it is still pending then."""
        return self.resume(
            thread_id,
            Command(resume={item.interrupt_id: value}),
            task=task,
            expect_interrupt=item.interrupt_id,
            allow_changed_definition=allow_changed_definition,
        )

    def decide(
        self,
        thread_id: str,
        step: str | None = None,
        *,
        approved: bool,
        by: str,
        comment: str | None = None,
        plan_hash: str | None = None,
        task: LongTask | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> str:
        """Approve or reject the pending approval ``step`` (the only one if None).

        ``plan_hash`` binds the decision to the plan the approver saw; without it the
        decision is for the plan pending now. ``config`` as for ``start``.
        """
        check_config(config)
        task = task or self._load(self._thread(thread_id))
        item = self._select(thread_id, task, step, "approval")
        try:
            decision = Decision(
                approved=approved,
                by=by,
                plan_hash=plan_hash or item.request["plan_hash"],
                comment=comment,
                at=self.clock(),
            )
        except ValidationError as exc:
            raise InvalidInput(f"the decision is not valid: {describe_validation(exc)}") from None
        value = self._answer(thread_id, task, item, decision)
        with using_config(config):
            return self._resume_pending(thread_id, task, item, value)

    def approve(
        self,
        thread_id: str,
        step: str | None = None,
        *,
        by: str,
        comment: str | None = None,
        plan_hash: str | None = None,
        task: LongTask | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> str:
        """Approve the pending approval ``step``; see :meth:`decide`."""
        return self.decide(
            thread_id,
            step,
            approved=True,
            by=by,
            comment=comment,
            plan_hash=plan_hash,
            task=task,
            config=config,
        )

    def reject(
        self,
        thread_id: str,
        step: str | None = None,
        *,
        by: str,
        comment: str | None = None,
        plan_hash: str | None = None,
        task: LongTask | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> str:
        """Reject the pending approval ``step``; its ``on_reject`` decides what follows."""
        return self.decide(
            thread_id,
            step,
            approved=False,
            by=by,
            comment=comment,
            plan_hash=plan_hash,
            task=task,
            config=config,
        )

    def signal(
        self,
        thread_id: str,
        name: str,
        payload: Any = None,
        *,
        by: str | None = None,
        task: LongTask | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> str:
        """Deliver the outside event ``name`` (a ``wait_for`` step) with ``payload``;
        ``wait.resolved`` records ``by`` (the user of this process if None). ``config`` as
        for ``start``."""
        check_config(config)
        task = task or self._load(self._thread(thread_id))
        item = self._select(thread_id, task, name, "wait")
        value = self._answer(thread_id, task, item, payload, by)
        with using_config(config):
            return self._resume_pending(thread_id, task, item, signal_value(value, by or whoami()))

    def answer(
        self,
        thread_id: str,
        value: Any,
        *,
        interrupt: str | None = None,
        task: LongTask | None = None,
        by: str | None = None,
        allow_changed_definition: bool = False,
    ) -> str:
        """Resume a pending interrupt (by step name or interrupt id) with a raw value:
        a decision for an approval (longtask's, or LangChain's ``{"decisions": [...]}``), a
        payload for a wait, any value for a gate. Checked like approve/signal.

        ``by``: who answers, as the calling layer knows it (an HTTP API takes it from the
        token): a HITL decision is recorded with it (else the user of this process), and a
        decision that names somebody else is refused. ``allow_changed_definition`` as for
        ``resume``."""
        task = task or self._load(self._thread(thread_id))
        item = self._select(thread_id, task, interrupt, None)
        if by is not None and item.kind == "approval" and not is_hitl(value):
            if isinstance(value, dict) and "by" not in value:
                value = {**value, "by": by}  # made by the caller: the payload need not say
            named = value.get("by") if isinstance(value, dict) else getattr(value, "by", None)
            if named != by:
                raise InvalidInput(
                    f"the decision for {item.step!r} names {named!r} as its approver, but it "
                    f"is given by {by!r}; a decision can only be given in one's own name"
                )
        checked = self._answer(thread_id, task, item, value, by=by)
        return self._resume_pending(thread_id, task, item, checked, allow_changed_definition)

    def effects(self, thread_id: str) -> list[Effect]:
        """The side-effect ledger of a thread, oldest first."""
        self._thread(thread_id)
        return self.db.store.effects(thread_id)

    def resolve_effect(
        self,
        thread_id: str,
        key: str,
        outcome: Literal["succeeded", "failed", "retry"],
        *,
        result: Any = None,
        by: str | None = None,
        task: LongTask | None = None,
    ) -> str:
        """Settle an effect whose outcome is unknown (the process died during the call):
        it ``succeeded`` (with ``result``), ``failed``, or should be tried again
        (``retry``). Then the thread continues if it was waiting on it."""
        rec = self._thread(thread_id)
        row = self.db.store.effect(key)
        if row is None or row.thread_id != thread_id:
            raise InvalidInput(
                f"thread {thread_id!r} has no effect {key!r}; see `longtask effects`"
            )
        if outcome not in ("succeeded", "failed", "retry"):
            raise InvalidInput("outcome must be succeeded, failed or retry")
        if outcome == "succeeded":
            to_json_bytes(result, "the result")
        task = task or self._load(rec)
        items = [
            p
            for p in self.pending(thread_id, task=task)
            if p.kind == "effect" and p.request.get("key") == key
        ]
        if row.status != "started":
            # Settled, but the thread may not have gone on: a resolve killed between its
            # ledger write and the resume leaves the pause (and its printed command) in
            # place. The same answer again continues the thread.
            settled = _settled_as(row)
            stuck = items or (rec.status == "running" and not self.db.is_locked(thread_id))
            if not stuck:
                raise InvalidInput(
                    f"effect {key} is {row.status}, not unknown; only an effect whose call "
                    "was cut off can be resolved"
                )
            if settled != outcome or (
                outcome == "succeeded" and result is not None and result != row.result
            ):
                kept = " (the result recorded is kept)" if settled == "succeeded" else ""
                raise InvalidInput(
                    f"effect {key} was already resolved as {settled}"
                    + (" with another result" if settled == outcome else "")
                    + " and the thread did not go on; continue it with "
                    f"`longtask effects resolve {thread_id} {key} --{settled}`{kept}"
                )
            if items:
                return self._resume_pending(thread_id, task, items[0], {"resolved": outcome})
            return self.resume(thread_id, task=task)
        # The record of who settled it first: a crash right after the settle would otherwise
        # lose it for good (the key makes a repeated resolve write it once).
        self.db.store.append_event(
            thread_id,
            "manual.resolve",
            key=f"manual.resolve/{key}",
            step=row.step,
            data={"key": key, "outcome": outcome, "by": by},
        )
        if outcome == "succeeded":
            self.db.store.effect_finish(key, "succeeded", result=result)
        else:
            self.db.store.effect_finish(
                key,
                "failed",
                error="retry"
                if outcome == "retry"
                else f"{RESOLVED_AS_FAILED} by {by or 'a person'}",
            )
        if items:
            return self._resume_pending(thread_id, task, items[0], {"resolved": outcome})
        if rec.status == "running" and not self.db.is_locked(thread_id):
            # Settled right after a crash, before any resume: continue the thread now.
            return self.resume(thread_id, task=task)
        return thread_id

    def tick(self, limit: int = 100, *, thread_id: str | None = None) -> list[TickResult]:
        """Act on every due deadline (approval or wait timeouts), across threads (or of one).

        Safe to run from cron and from several processes at once: a thread another process
        is advancing is left for it (``busy``), and a resolved pause is just forgotten.
        """
        now = self.clock()
        results = []
        due = self.db.store.due_timers(now.timestamp(), limit)
        if thread_id is not None:
            due = [d for d in due if d[0] == thread_id]
        for thread_id, step, _due in due:
            try:
                rec = self._thread(thread_id)
                task = self._load(rec)
                items = [p for p in self.pending(thread_id, task=task) if p.step == step]
                if not items:
                    self.db.store.timer_clear(thread_id, step)
                    results.append(TickResult(thread_id, step, "not waiting"))
                    continue
                self._resume_pending(thread_id, task, items[0], TIMEOUT)
                results.append(TickResult(thread_id, step, "timed out"))
            except ThreadBusy:
                results.append(TickResult(thread_id, step, "busy"))
            except NotWaiting:
                # Another tick (or an answer) acted on it first, under the thread's lock.
                results.append(TickResult(thread_id, step, "not waiting"))
            except StepFailed:
                results.append(TickResult(thread_id, step, "failed"))
            except LongTaskError as exc:
                results.append(TickResult(thread_id, step, f"error: {exc}"))
        return results


def _settled_as(row: Effect) -> str:
    """The answer ``resolve_effect`` gave a settled effect: succeeded, failed or retry."""
    if row.status == "succeeded":
        return "succeeded"
    return "retry" if row.error == "retry" else "failed"
