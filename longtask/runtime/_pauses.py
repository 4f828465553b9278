"""The Runner's side of pauses: what a thread waits for, and answering it.

Every answer is checked here, against the pending request, before anything is handed to
LangGraph: a wrong plan hash, an approver who may not decide, a passed deadline, a payload
that does not match its schema or a step that is not waiting is an error, and the thread's
state is left exactly as it was.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from langgraph.types import Command
from pydantic import ValidationError

from longtask._schema_example import schema_example
from longtask.errors import (
    BadAnswer,
    InvalidInput,
    LongTaskError,
    StepFailed,
    ThreadBusy,
    describe_validation,
)
from longtask.model import ApprovalRequest, Decision, LongTask, WaitStep
from longtask.model._decision import plan_hash as hash_plan
from longtask.runtime._answers import GATE_ANSWER, NotWaiting
from longtask.runtime._calls import StreamSpec, check_config, using_config
from longtask.runtime._interrupts import GATE_KINDS
from longtask.runtime._text import refuse_bad_text
from longtask.runtime._views import Pending
from longtask.runtime._who import whoami
from longtask.steps import INTERRUPT_KIND, TIMEOUT, check_decision, check_payload
from longtask.steps._effectanswer import Settled, effect_answer
from longtask.steps._effects import failed_error
from longtask.steps._hitl import decision_from_hitl, is_hitl, is_tool_approval
from longtask.steps._pause import signal_value
from longtask.steps._review import review_answer, review_of_request, schema_problem
from longtask.store import Effect
from longtask.store._kinds import SUBTASK_KIND
from longtask.store._values import to_json_bytes

if TYPE_CHECKING:
    from longtask.checkpointers import Database
    from longtask.runtime._engine import Engine
    from longtask.runtime._queue import Queue
    from longtask.runtime._reading import Reads


@dataclass
class TickResult:
    thread_id: str
    step: str
    #: "timed out", "failed", "busy", "not waiting", "sub-tasks ended: continued"
    outcome: str


class Pauses:
    """Answering a paused thread: approve, reject, decide, signal, a raw answer, settling an
    effect cut off mid-call, and ``tick`` (deadlines that passed). Each answer is checked
    (approvers, plan hash, deadline, payload schema) against the pending request from
    ``reads``, then the run core (``engine``) resumes the thread with it. ``clock`` decides
    deadlines (the database server's on PostgreSQL)."""

    def __init__(
        self,
        db: Database,
        clock: Callable[[], datetime],
        reads: Reads,
        engine: Engine,
        queue: Queue,
    ) -> None:
        self.db = db
        self.clock = clock
        self._reads = reads
        self._engine = engine
        self._queue = queue

    def _checking(self, thread_id: str, task: LongTask | None) -> tuple[LongTask, str | None]:
        """The thread's task, and for a thread served by workers the queue's mark, taken
        before an answer is checked against its state: the answer is queued only if that
        state is still the thread's then (``Queue.enqueue``)."""
        rec = self._reads.thread(thread_id)
        return task or self._engine.load(rec), self._queue.mark(rec)

    def select(
        self, thread_id: str, task: LongTask, target: str | None, kind: str | None
    ) -> Pending:
        rec = self._reads.thread(thread_id)
        items = [
            p
            for p in self._reads.pending(thread_id, task=task)
            if kind is None or p.kind == kind or (kind == "approval" and _reviews(p))
        ]
        what = {
            "approval": "an approval",
            "wait": "an outside event",
            "effect": "a person to settle an effect",
        }.get(kind or "", "an answer")
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
            if target in (p.step, p.interrupt_id) or (
                p.kind == "effect" and target == p.request.get("key")
            ):
                return p
        names = ", ".join(p.step for p in items)
        raise InvalidInput(
            f"{target!r} of thread {thread_id!r} is not waiting for {what}; waiting: {names}"
        )

    def resume_value(
        self, thread_id: str, task: LongTask, item: Pending, value: Any, by: str | None = None
    ) -> Any:
        """The checked resume value for ``item`` (raises InvalidInput, changing nothing)."""
        refuse_bad_text(value, "the answer")
        refuse_bad_text(by, "the name it is answered by")
        if item.kind == "effect":
            # Any shape that says what became of the call (longtask's, Agent Inbox's), in
            # longtask's own: settled by ``resolve_effect`` (``answer``), or by the graph.
            return self.effect_answer(thread_id, item, value, by).native(item.request["key"])
        if item.kind == SUBTASK_KIND:
            raise InvalidInput(
                f"step {item.step!r} waits for its sub-tasks, which continue it when they "
                f"end: see them with `longtask status {thread_id} --tree`, and answer their "
                "own pauses"
            )
        if item.kind == INTERRUPT_KIND:
            # The graph's own interrupt: its answer is whatever the graph expects, as JSON,
            # and what the graph said it expects is checked here: an answer it cannot take
            # would raise inside the graph and fail the step.
            to_json_bytes(value, "the answer")
            return graph_answer(item, value)
        if item.kind in GATE_KINDS:
            # Any value: the step looks again (and pauses again if it is still blocked).
            return value if value is not None else GATE_ANSWER
        if item.kind == "approval":
            request = ApprovalRequest.model_validate(item.request)
            tool = is_tool_approval(item.request)
            # A HITL answer names nobody: it is recorded as decided by whom the caller
            # vouches for (an HTTP API: the token's actor), else this process's user.
            value = decision_from_hitl(
                request,
                value,
                self.clock(),
                by=by or whoami(),
                plan_of=(lambda args: {"tool": item.request["tool"], "args": args})
                if tool
                else None,
                tool=tool,
            )
            decision = check_decision(request, value, self.clock(), step=item.step, tool=tool)
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
        seen: str | None = None,
        by: str | None = None,
    ) -> str:
        """Continue the thread with ``value`` for ``item``, if it is still pending then
        (``seen``: the queue's mark taken before the answer was checked, see ``_checking``;
        ``by``: who answers, recorded with an answer to a graph's interrupt)."""
        parts = self._engine.resume_run(
            thread_id,
            Command(resume={item.interrupt_id: value}),
            task=task,
            expect_interrupt=item.interrupt_id,
            by=by or (whoami() if item.kind == INTERRUPT_KIND else None),
            allow_changed_definition=allow_changed_definition,
            spec=StreamSpec(),
            config=None,
            seen=seen,
        )
        for _ in parts:
            pass
        return thread_id

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
        edited_args: dict[str, Any] | None = None,
        response: str | None = None,
    ) -> str:
        """Approve or reject the pending approval ``step`` (the only one if None).

        ``plan_hash`` binds the decision to the plan the approver saw; without it the
        decision is for the plan pending now. ``config`` as for ``start``. A tool call's
        approval may instead be approved with corrected ``edited_args`` (the tool runs
        with them) or answered with a ``response`` in the tool's place (it does not run).
        """
        check_config(config)
        task, seen = self._checking(thread_id, task)
        item = self.select(thread_id, task, step, "approval")
        if item.kind == INTERRUPT_KIND:
            # A tool review of the graph's own (HumanInTheLoopMiddleware): the decision in
            # longtask's shape, converted to the graph's with every other answer's checks.
            own: dict[str, Any] = {"approved": approved, "comment": comment}
            own["plan_hash"] = plan_hash
            own |= {"edited_args": edited_args, "response": response}
            given = {k: v for k, v in own.items() if v is not None or k == "approved"}
            with using_config(config):
                return self.answer(thread_id, given, interrupt=item.interrupt_id, task=task, by=by)
        decision = self.decision(
            item,
            approved=approved,
            by=by,
            comment=comment,
            plan_hash=plan_hash,
            edited_args=edited_args,
            response=response,
        )
        value = self.resume_value(thread_id, task, item, decision)
        with using_config(config):
            return self._resume_pending(thread_id, task, item, value, seen=seen)

    def decision(
        self,
        item: Pending,
        *,
        approved: bool,
        by: str,
        comment: str | None = None,
        plan_hash: str | None = None,
        edited_args: dict[str, Any] | None = None,
        response: str | None = None,
    ) -> Decision:
        """A decision on the pending approval ``item``, made now (InvalidInput if it is not
        one; whether it may be given is checked by ``resume_value``)."""
        edited_hash = None
        if edited_args is not None:
            edited_hash = hash_plan({"tool": item.request.get("tool"), "args": edited_args})
        try:
            return Decision(
                approved=approved,
                by=by,
                plan_hash=plan_hash or item.request["plan_hash"],
                comment=comment,
                at=self.clock(),
                edited_args=edited_args,
                edited_hash=edited_hash,
                response=response,
            )
        except ValidationError as exc:
            raise InvalidInput(f"the decision is not valid: {describe_validation(exc)}") from None

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
        task, seen = self._checking(thread_id, task)
        item = self.select(thread_id, task, name, "wait")
        value = self.resume_value(thread_id, task, item, payload, by)
        answer = signal_value(value, by or whoami())
        with using_config(config):
            return self._resume_pending(thread_id, task, item, answer, seen=seen)

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
        """Resume a pending interrupt (by step name or interrupt id; an effect's also by its
        key) with a raw value: a decision for an approval (longtask's, or LangChain's
        ``{"decisions": [...]}``), a payload for a wait, any value for a gate, what became
        of the call for an effect cut off mid-call (longtask's shape or Agent Inbox's,
        settled with ``resolve_effect``). Checked like approve/signal.

        ``by``: who answers, as the calling layer knows it (an HTTP API takes it from the
        token): a HITL decision is recorded with it (else the user of this process), and a
        decision that names somebody else is refused. ``allow_changed_definition`` as for
        ``resume``."""
        task, seen = self._checking(thread_id, task)
        item = self.select(thread_id, task, interrupt, None)
        if by is not None and item.kind == "approval" and not is_hitl(value):
            if isinstance(value, dict) and "by" not in value:
                value = {**value, "by": by}  # made by the caller: the payload need not say
            named = value.get("by") if isinstance(value, dict) else getattr(value, "by", None)
            if named != by:
                raise InvalidInput(
                    f"the decision for {item.step!r} names {named!r} as its approver, but it "
                    f"is given by {by!r}; a decision can only be given in one's own name"
                )
        checked = self.resume_value(thread_id, task, item, value, by=by)
        if item.kind == "effect":
            # Settled in the ledger at acceptance, then the thread goes on: a crash after
            # this finds the call settled and never asks again.
            settled = self.effect_answer(thread_id, item, checked, by)
            return self.resolve_effect(
                thread_id,
                item.request["key"],
                settled.outcome,
                result=settled.result,
                reason=settled.reason,
                by=by or settled.by or whoami(),
                task=task,
            )
        # Who answered a graph's own interrupt (its answer is the graph's, with no room for a
        # name) is recorded by the run once it accepted the answer, with the answer itself
        # (runtime._accepted): a refused answer leaves no record.
        return self._resume_pending(
            thread_id, task, item, checked, allow_changed_definition, seen=seen, by=by
        )

    def effect_answer(
        self, thread_id: str, item: Pending, value: Any, by: str | None = None
    ) -> Settled:
        """What ``value`` says of the cut-off call effect pause ``item`` waits on
        (BadAnswer naming the shapes it takes; InvalidInput if it names somebody other than
        ``by``, who gives it)."""
        where = f"the answer to effect {item.request.get('name')!r} of {item.step!r}"
        settled = effect_answer(where, str(item.request.get("key")), value)
        if by is not None and settled.by is not None and settled.by != by:
            raise InvalidInput(
                f"the answer names {settled.by!r} as who settled effect "
                f"{item.request.get('key')}, but it is given by {by!r}; an answer can only "
                "be given in one's own name"
            )
        return settled

    def resolve_effect(
        self,
        thread_id: str,
        key: str,
        outcome: Literal["succeeded", "failed", "retry"],
        *,
        result: Any = None,
        reason: str | None = None,
        by: str | None = None,
        task: LongTask | None = None,
    ) -> str:
        """Settle an effect whose outcome is unknown (the process died during the call):
        it ``succeeded`` (with ``result``), ``failed`` (``reason``: why, if known), or should
        be tried again (``retry``). Then the thread continues if it was waiting on it."""
        refuse_bad_text(reason, "the reason")
        refuse_bad_text(by, "the name it is settled by")
        if reason is not None and outcome != "failed":
            raise InvalidInput("a reason goes with the outcome failed")
        rec = self._reads.thread(thread_id)
        row = self.db.store.effect(key)
        if row is None or row.thread_id != thread_id:
            raise InvalidInput(
                f"thread {thread_id!r} has no effect {key!r}; see `longtask effects`"
            )
        if outcome not in ("succeeded", "failed", "retry"):
            raise InvalidInput("outcome must be succeeded, failed or retry")
        if outcome == "succeeded":
            to_json_bytes(result, "the result")
        task = task or self._engine.load(rec)
        items = [
            p
            for p in self._reads.pending(thread_id, task=task)
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
            return self._engine.resume(thread_id, task=task)
        # The record of who settled it first: a crash right after the settle would otherwise
        # lose it for good (the key makes a repeated resolve write it once).
        self.db.store.append_event(
            thread_id,
            "manual.resolve",
            key=f"manual.resolve/{key}",
            step=row.step,
            data={"key": key, "outcome": outcome, "by": by}
            | ({"reason": reason} if reason else {}),
        )
        if outcome == "succeeded":
            self.db.store.effect_finish(key, "succeeded", result=result)
        else:
            self.db.store.effect_finish(
                key, "failed", error="retry" if outcome == "retry" else failed_error(by, reason)
            )
        if items:
            return self._resume_pending(thread_id, task, items[0], {"resolved": outcome})
        if rec.status == "running" and not self.db.is_locked(thread_id):
            # Settled right after a crash, before any resume: continue the thread now.
            return self._engine.resume(thread_id, task=task)
        return thread_id

    def tick(self, limit: int = 100, *, thread_id: str | None = None) -> list[TickResult]:
        """Act on every due deadline (approval or wait timeouts), across threads (or of one),
        and continue any parent whose sub-tasks have all ended but that still waits (its
        continuation was lost with a process that died).

        Safe to run from cron and from several processes at once: a thread another process
        is advancing is left for it (``busy``), and a resolved pause is just forgotten.
        """
        now = self.clock()
        results = []
        only = thread_id  # the loop below reuses the name
        due = self.db.store.due_timers(now.timestamp(), limit)
        if thread_id is not None:
            due = [d for d in due if d[0] == thread_id]
        for thread_id, step, _due in due:
            try:
                rec = self._reads.thread(thread_id)
                task = self._engine.load(rec)
                items = [p for p in self._reads.pending(thread_id, task=task) if p.step == step]
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
        for parent, step in self._engine.subtasks.sweep(limit, only):
            results.append(TickResult(parent, step, "sub-tasks ended: continued"))
        return results


def _reviews(item: Pending) -> bool:
    """Whether ``item`` is a tool review of a graph's own, which approve and reject answer."""
    return item.kind == INTERRUPT_KIND and review_of_request(item.request) is not None


def graph_answer(item: Pending, value: Any) -> Any:
    """``value`` as the graph's interrupt ``item`` takes it: a tool review of LangChain's
    HumanInTheLoopMiddleware gets its decisions from any shape that says them
    unambiguously (steps._review); an interrupt with a response schema gets an answer that
    fits it. Else BadAnswer, naming the shape, with nothing recorded."""
    where = f"the answer to {item.step!r} (interrupt {item.interrupt_id})"
    schema = item.request.get("response_schema")
    review = review_of_request(item.request)
    if review is not None:
        return review_answer(where, review, value, schema)
    if isinstance(schema, Mapping):
        problem = schema_problem(value, schema)
        if problem is not None:
            raise BadAnswer(
                f"{where} does not fit the schema the graph gave for it: {problem}; it "
                f"takes {json.dumps(schema_example(schema), ensure_ascii=False)} "
                f"(schema: {json.dumps(schema, ensure_ascii=False)[:300]})"
            )
    return value


def _settled_as(row: Effect) -> str:
    """The answer ``resolve_effect`` gave a settled effect: succeeded, failed or retry."""
    if row.status == "succeeded":
        return "succeeded"
    return "retry" if row.error == "retry" else "failed"
