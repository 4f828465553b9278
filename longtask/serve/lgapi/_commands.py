"""What a LangGraph run asks for, checked in the request before anything is recorded.

``command={"resume": ...}`` answers the thread's pending interrupt with the CLI's checks:
an approval takes ``true``/``false``, ``{"approved": ..., "comment": ..., "plan_hash": ...}``
or LangChain's human-in-the-loop ``{"decisions": [{"type": "approve" | "reject"}]}``, and is
made by the token's name (an approver the request names may not decide is refused); a wait
takes its payload, checked against the step's schema; the interrupt of a graph step's own
graph takes any JSON value that fits the interrupt's response schema, and a tool review of
LangChain's ``HumanInTheLoopMiddleware`` takes its decisions in LangChain's, Agent Inbox's or
longtask's shape (steps._review); an effect cut off mid-call takes what became of the call,
in longtask's shape or Agent Inbox's (steps._effectanswer); one it cannot take is a 422. A
resume keyed by interrupt id answers several at once.

Whether the caller may answer each pause a resume answers is asked first, once the pauses
are known (``Answering.check``, serve.access): an approver answers the approvals that name
them, nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from longtask.errors import InvalidInput, NothingToResume
from longtask.steps._hitl import is_hitl

if TYPE_CHECKING:
    from longtask._runner import Runner
    from longtask.model import LongTask
    from longtask.runtime._views import Pending
    from longtask.serve.access import Answering
    from longtask.store import ThreadRecord

APPROVE = {"approve", "approved", "accept", "yes"}
REJECT = {"reject", "rejected", "deny", "no"}
APPROVAL_SHAPES = (
    'answer an approval with true/false, {"approved": true, "comment": "..."} or '
    '{"decisions": [{"type": "approve"}]}'
)


def _decision(value: Any) -> tuple[bool, str | None, str | None]:
    """(approved, comment, plan_hash) from a plain resume value for an approval."""
    if isinstance(value, bool):
        return value, None, None
    if isinstance(value, str) and value.lower() in APPROVE | REJECT:
        return value.lower() in APPROVE, None, None
    if isinstance(value, dict):
        if "by" in value:
            raise InvalidInput("'by' is not accepted: whoever decides is the bearer token's name")
        if isinstance(value.get("approved"), bool):
            return value["approved"], value.get("comment"), value.get("plan_hash")
    raise InvalidInput(APPROVAL_SHAPES)


def _check(
    runner: Runner, thread_id: str, task: LongTask, item: Pending, value: Any, actor: str
) -> dict[str, Any]:
    if item.kind == "approval":
        if is_hitl(value):
            # LangChain's decisions or Agent Inbox's responses, decided by the token's name.
            decided = runner.pauses.resume_value(thread_id, task, item, value, by=actor)
        else:
            approved, comment, plan_hash = _decision(value)
            decision = runner.pauses.decision(
                item, approved=approved, by=actor, comment=comment, plan_hash=plan_hash
            )
            decided = runner.pauses.resume_value(thread_id, task, item, decision)
        return {
            "kind": "approval",
            "step": item.step,
            "interrupt_id": item.interrupt_id,
            "approved": decided["approved"],
            "comment": decided.get("comment"),
            "plan_hash": decided["plan_hash"],
            "edited_args": decided.get("edited_args"),
            "response": decided.get("response"),
        }
    if item.kind == "effect":
        # what became of a call cut off mid-call, in longtask's or Agent Inbox's shape:
        # settled in the ledger when the run is carried out, by the token's name
        checked = runner.pauses.resume_value(thread_id, task, item, value, by=actor)
        settled = runner.pauses.effect_answer(thread_id, item, checked, actor)
        return {
            "kind": "effect",
            "step": item.step,
            "interrupt_id": item.interrupt_id,
            "key": item.request["key"],
            "outcome": settled.outcome,
            "result": settled.result,
            "reason": settled.reason,
        }
    checked = runner.pauses.resume_value(thread_id, task, item, value)
    if item.kind == "interrupt":
        # a graph step's own interrupt: the answer is the graph's, kept by its id, as the
        # graph takes it (a tool review's decisions converted from Agent Inbox's shape)
        return {
            "kind": "interrupt",
            "step": item.step,
            "interrupt_id": item.interrupt_id,
            "value": checked,
        }
    # a wait's payload as checked (Agent Inbox's response to it unwrapped)
    payload = checked if item.kind == "wait" else value
    return {"kind": "wait", "step": item.step, "payload": payload}


def plan_command(
    runner: Runner,
    rec: ThreadRecord,
    task: LongTask,
    command: dict[str, Any],
    actor: str,
    answering: Answering | None,
) -> dict[str, Any]:
    """The run request for ``command`` on ``rec`` (raises InvalidInput, storing nothing).
    ``answering``: what the caller may answer (None: nothing; a resume is refused)."""
    unknown = set(command) - {"resume", "update", "goto"}
    if unknown:
        raise InvalidInput(f"a command takes resume, update and goto, not {sorted(unknown)}")
    if command.get("resume") is not None:
        if command.get("update") is not None or command.get("goto"):
            raise InvalidInput("send resume alone, or update/goto alone")
        thread_id = rec.thread_id
        pending = runner.pending(thread_id, task=task)
        if not pending:
            if rec.status == "pending":
                raise InvalidInput(
                    f"thread {thread_id!r} is not waiting for an answer: its state was "
                    "updated (or forked), so the steps after the change run again; start a "
                    "run with no command to continue it, then answer what it asks (an "
                    "approval asks again, with its plan from the new results)"
                )
            raise InvalidInput(
                f"thread {thread_id!r} is not waiting for an answer (status: {rec.status})"
            )
        resume = command["resume"]
        by_id = {p.interrupt_id: p for p in pending}
        if isinstance(resume, dict) and resume and all(k in by_id for k in resume):
            pairs = [(by_id[k], v) for k, v in resume.items()]
        elif len(pending) == 1:
            pairs = [(pending[0], resume)]
        else:
            raise InvalidInput(
                f"thread {thread_id!r} waits for several answers "
                f"({', '.join(p.step for p in pending)}): key the resume by interrupt id"
            )
        _may_answer(answering, rec.thread_id, [item for item, _ in pairs])
        return {
            "kind": "answer",
            "answers": [_check(runner, thread_id, task, item, v, actor) for item, v in pairs],
        }
    if command.get("update") is not None or command.get("goto"):
        update = command.get("update")
        if update is not None and not isinstance(update, dict):
            raise InvalidInput("command update must be an object of step name to result")
        if not update and not command.get("goto"):
            raise InvalidInput(
                "the command's update is empty and it has no goto: give the results to set "
                "(step name to result), a goto, or resume"
            )
        goto = command.get("goto")
        goto = [goto] if isinstance(goto, str) else goto
        if goto is not None and not (
            isinstance(goto, list) and all(isinstance(g, str) for g in goto)
        ):
            raise InvalidInput("command goto must be a step name or a list of them")
        if goto and "__end__" in goto:
            raise InvalidInput(
                'goto "__end__" is not supported: a longtask thread ends when its steps are '
                "done; to stop it, cancel the run (runs.cancel) or the thread "
                f"(`longtask cancel {rec.thread_id} --by NAME`); to answer what it waits for, "
                'send command={"resume": ...}'
            )
        bad = [g for g in goto or [] if g not in task.steps]
        if bad:
            raise InvalidInput(
                f"{', '.join(map(repr, bad))}: not a step of {task.name!r} "
                f"(steps: {', '.join(task.steps)})"
            )
        if update:
            # Refused here, in the request, by the gate the run's write passes (runtime._gate).
            runner.engine.gate.check(
                task, runner.graph(task), rec.thread_id, update, door="command"
            )
        # Refused here, in the request, as the run would refuse it: a goto past a pending
        # (or unanswered) approval or wait. The API never skips one.
        runner.gotos.check(rec, task, goto or [], skip_pending=False, by=actor, record=False)
        return {"kind": "command", "update": update, "goto": goto}
    raise InvalidInput("the command is empty: give resume, update or goto")


def plan_answer(
    runner: Runner,
    rec: ThreadRecord,
    task: LongTask,
    target: str | None,
    kind: str | None,
    value: Any,
    actor: str,
    answering: Answering,
) -> dict[str, Any]:
    """The run request answering the pending ``kind`` (approval or wait; any if None)
    ``target`` (the only one if None) of ``rec`` with ``value``, checked (raises
    InvalidInput; HTTPException if ``answering`` may not answer it)."""
    item = runner.pauses.select(rec.thread_id, task, target, kind)
    answering.check([item])
    return {"kind": "answer", "answers": [_check(runner, rec.thread_id, task, item, value, actor)]}


def _may_answer(answering: Answering | None, thread_id: str, items: list[Pending]) -> None:
    if answering is None:
        from starlette.exceptions import HTTPException

        raise HTTPException(403, f"this request may not answer the pauses of {thread_id!r}")
    answering.check(items)


def plan_continue(rec: ThreadRecord) -> dict[str, Any]:
    if rec.status in ("completed", "cancelled"):
        raise NothingToResume(rec.thread_id, rec.status)
    return {"kind": "continue"}
