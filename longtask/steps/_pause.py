"""Approvals and waits: durable pauses that hold no process.

Each compiles to three nodes:

- ``<step>.request`` records the request in state (plan, plan hash, approvers, deadline,
  request time; or the wait's schema and deadline), sets its deadline timer and emits
  ``approval.required`` / ``wait.started``. It runs once per request, so the request is
  stable across resumes.
- ``<step>.ask`` calls ``interrupt()`` with that request and checks the answer. LangGraph
  runs it again from its first line on resume, so nothing before ``interrupt()`` has an
  effect outside the state: it only reads the request, recomputes the plan's hash and reads
  the clock. A plan that changed since the request (an earlier result was updated), or a
  decision older than ``valid_for`` when execution reaches it, sends control back to
  ``<step>.request`` for a fresh request. It has no static out-edges: a ``goto`` in
  LangGraph is added to a node's edges, so dependents wired to it would run on every pass.
- ``<step>`` is reached only with a real outcome; dependents' edges start from it.

Answers are validated by the Runner before they are handed to LangGraph (so a bad answer
leaves the thread untouched); ``<step>.ask`` checks them again and refuses (and asks again
after) an answer given through LangGraph's own API. An approval's interrupt value also has
LangChain's human-in-the-loop shape, and a ``{"decisions": [...]}`` answer is accepted with
the same checks (see longtask.steps._hitl).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, interrupt
from pydantic import BaseModel, ValidationError

from longtask._schema_example import schema_example
from longtask.errors import InvalidInput, LongTaskError, describe_validation
from longtask.model import (
    ApprovalRequest,
    ApprovalStep,
    Decision,
    PauseStep,
    StepInfo,
    WaitRequest,
    WaitStep,
)
from longtask.model._decision import plan_hash
from longtask.steps._context import result_channel
from longtask.steps._function import (
    NodeCall,
    StepEnv,
    call_step,
    skip_update,
    skipped_by,
    step_completed,
    step_failed,
    step_started,
)
from longtask.steps._hitl import decision_from_hitl, payload_from_inbox, with_hitl
from longtask.store import is_skipped, sending_ahead

Node = Callable[[dict[str, Any], RunnableConfig], Any]

#: the resume value `tick` sends to a pause whose deadline has passed
TIMEOUT = {"__longtask_timeout__": True}


class PauseOutcome(LongTaskError):
    """An approval was rejected or a pause timed out, and its policy is to fail."""

    retryable = False

    def __init__(self, message: str, outcome: str) -> None:
        super().__init__(message)
        #: what ended the pause, said to people: "rejected" or "timed out"
        self.outcome = outcome

    def __reduce__(self) -> tuple[Any, ...]:
        # Copied and pickled with both arguments (the default passes only the message).
        return (type(self), (str(self), self.outcome))


def approval_value(req: dict[str, Any]) -> dict[str, Any]:
    """An approval's interrupt value: its request, with LangChain's HITL request added."""
    who = f"; approvers: {', '.join(req['approvers'])}" if req.get("approvers") else ""
    due = f"; decide before {req['deadline']}" if req.get("deadline") else ""
    return with_hitl(
        req,
        req["step"],
        {"plan": req.get("plan"), "plan_hash": req.get("plan_hash")},
        f"Approve the plan of step {req['step']!r} (plan hash {req.get('plan_hash')}){who}{due}",
    )


def wait_value(req: dict[str, Any]) -> dict[str, Any]:
    """A wait's interrupt value: its request, with LangChain's HITL request added so Agent
    Inbox can offer it: the payload to send, as an example of its schema to edit (or JSON
    text to respond with)."""
    schema = req.get("schema")
    example = schema_example(schema) if isinstance(schema, dict) else {}
    return with_hitl(
        req,
        req["step"],
        example if isinstance(example, dict) else {"payload": example},
        f"Send the outside event {req['step']!r} waits for: its payload, as JSON"
        + (f"; before {req['deadline']}" if req.get("deadline") else ""),
        ["edit", "respond"],
    )


def ask_node_name(step: str) -> str:
    return f"{step}.ask"


def request_node_name(step: str) -> str:
    return f"{step}.request"


def request_channel(step: str) -> str:
    return f"pause.{step}"


def check_decision(
    request: ApprovalRequest, answer: Any, now: datetime, *, step: str, tool: bool = False
) -> Decision:
    """Parse and check an answer to ``request`` (``tool``: a tool call's, which may also be
    edited or responded to); InvalidInput says what is wrong."""
    try:
        decision = answer if isinstance(answer, Decision) else Decision.model_validate(answer)
    except ValidationError as exc:
        raise InvalidInput(
            f"the answer to approval {step!r} is not a decision "
            f"(approved, by, plan_hash, comment, at): {describe_validation(exc)}"
        ) from exc
    if not tool and (decision.edited_args is not None or decision.response is not None):
        raise InvalidInput(
            f"approval {step!r} is an approval step's: its plan is approved or rejected, "
            "never edited or answered in the tool's place"
        )
    if decision.edited_args is not None:
        # Bound to the corrected call: the hash must be that call's, whoever wrote it.
        corrected = {"tool": (request.plan or {}).get("tool"), "args": decision.edited_args}
        if plan_hash(corrected) != decision.edited_hash:
            raise InvalidInput(
                f"the edit for {step!r} is bound to call {decision.edited_hash}, but its "
                f"arguments make call {plan_hash(corrected)}; decide again"
            )
    if decision.at > now + timedelta(minutes=5):
        raise InvalidInput(
            f"the decision for {step!r} is dated {decision.at.isoformat()}, in the future; "
            "give the time it was made"
        )
    if decision.plan_hash != request.plan_hash:
        raise InvalidInput(
            f"the decision for {step!r} approves plan {decision.plan_hash}, but the plan "
            f"waiting for approval is {request.plan_hash}; look at it with "
            "`longtask pending THREAD` and decide again"
        )
    if request.approvers and decision.by not in request.approvers:
        raise InvalidInput(
            f"{decision.by!r} may not decide approval {step!r}; allowed: "
            f"{', '.join(request.approvers)}"
        )
    if request.deadline is not None and now > request.deadline:
        raise InvalidInput(
            f"the deadline of approval {step!r} passed at {request.deadline.isoformat()}; "
            "`longtask tick` applies its on_timeout policy"
        )
    return decision


def check_payload(step: WaitStep, payload: Any) -> Any:
    """Validate a wait's payload against its schema; returns the JSON value to store."""
    payload = payload_from_inbox(step.name, payload)
    schema = step.schema_
    if schema is None:
        return payload
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            return schema.model_validate(payload).model_dump(mode="json")
        except ValidationError as exc:
            raise InvalidInput(
                f"the payload for {step.name!r} does not match {schema.__name__}: "
                f"{describe_validation(exc)}"
            ) from exc
    import jsonschema  # type: ignore[import-untyped]

    try:
        jsonschema.validate(payload, schema)
    except jsonschema.ValidationError as exc:
        raise InvalidInput(
            f"the payload for {step.name!r} does not match its schema: {exc.message}"
        ) from exc
    return payload


#: marks a wait's resume value that carries who delivered the event (``Runner.signal``)
SIGNAL_KEY = "__longtask_signal__"


def signal_value(payload: Any, by: str) -> dict[str, Any]:
    """The resume value of a wait: its checked payload, and who delivered it."""
    return {SIGNAL_KEY: 1, "payload": payload, "by": by}


def _unwrap_signal(answer: Any) -> tuple[Any, str | None]:
    # A bare payload (LangGraph's own Command) is still accepted: nobody is named then.
    if (
        isinstance(answer, dict)
        and answer.get(SIGNAL_KEY) == 1
        and set(answer)
        == {
            SIGNAL_KEY,
            "payload",
            "by",
        }
    ):
        return answer["payload"], answer["by"]
    return answer, None


def pause_nodes(step: PauseStep, info: StepInfo, env: StepEnv) -> tuple[Node, Node, Node]:
    channel = request_channel(step.name)
    is_approval = isinstance(step, ApprovalStep)
    kind = "approval" if is_approval else "wait"

    def current_plan(state: dict[str, Any], call: NodeCall) -> Any:
        if not isinstance(step, ApprovalStep) or step.plan is None:
            return None
        plan = call_step(
            step.plan, (env.context(call, info, state),), None, f"plan of {step.name!r}"
        )
        return env.codec.decode(env.codec.encode(plan, f"the plan of approval {step.name!r}"))

    def request(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        call = NodeCall.from_config(config)
        reason = skipped_by(state, info, env.pauses)
        if reason:
            return skip_update(env, call, info, reason)
        now = env.clock()
        deadline = now + timedelta(seconds=step.timeout) if step.timeout else None
        req: ApprovalRequest | WaitRequest
        try:
            if isinstance(step, ApprovalStep):
                plan = current_plan(state, call)
                req = ApprovalRequest(
                    step=step.name,
                    plan=plan,
                    plan_hash=plan_hash(plan),
                    approvers=list(step.approvers) if step.approvers else None,
                    requested_at=now,
                    deadline=deadline,
                    valid_for=step.valid_for,
                )
            else:
                assert isinstance(step, WaitStep)
                schema = step.schema_
                if isinstance(schema, type) and issubclass(schema, BaseModel):
                    schema = schema.model_json_schema()
                req = WaitRequest(step=step.name, schema=schema, started_at=now, deadline=deadline)
        except Exception as exc:
            step_failed(env, call, info, exc)
            raise
        if deadline is not None:
            env.store.timer_set(call.thread_id, step.name, deadline.timestamp())
        step_started(env, call, info)
        data = req.model_dump(mode="json", by_alias=True)
        env.emit(
            call,
            "approval.required" if is_approval else "wait.started",
            call.key(kind, "requested"),
            info,
            data=data,
        )
        return {channel: data}

    def timed_out(call: NodeCall, req: dict[str, Any]) -> Any:
        env.emit(
            call,
            f"{kind}.expired",
            call.key(kind, "expired"),
            info,
            data={"reason": "deadline", "deadline": req.get("deadline")},
        )
        env.store.timer_clear(call.thread_id, step.name)
        policy = step.on_timeout
        if policy == "fail":
            exc = PauseOutcome(
                f"{kind} {step.name!r} timed out at {req.get('deadline')}", "timed out"
            )
            step_failed(env, call, info, exc)
            raise exc
        if policy == "reject":
            assert isinstance(step, ApprovalStep)
            return rejected(call, req, None, "rejected (timed out)")
        value = env.codec.encode(None)
        if policy != "skip":
            value = sending_ahead(value, policy, "timed out")
        return {result_channel(step.name): value}

    def rejected(
        call: NodeCall, req: dict[str, Any], decision: Decision | None, why: str
    ) -> dict[str, Any]:
        assert isinstance(step, ApprovalStep)
        value = env.codec.encode(
            decision.model_dump(mode="json") if decision else {"approved": False, "by": None}
        )
        if step.on_reject == "fail":
            who = f" by {decision.by}" if decision else ""
            note = f": {decision.comment}" if decision and decision.comment else ""
            exc = PauseOutcome(
                f"approval {step.name!r} was {why}{who}{note}",
                "rejected" if decision else "timed out",
            )
            step_failed(env, call, info, exc)
            raise exc
        return {result_channel(step.name): sending_ahead(value, step.on_reject, why)}

    def accept(answer: Any, req: dict[str, Any], deadline: datetime | None, now: datetime) -> Any:
        """TIMEOUT, the checked payload of a wait, or the checked Decision of an approval."""
        if answer == TIMEOUT:
            if deadline is None or now <= deadline:
                raise InvalidInput(f"{kind} {step.name!r} has not reached its deadline")
            return TIMEOUT
        if isinstance(step, WaitStep):
            payload, by = _unwrap_signal(answer)
            return check_payload(step, payload), by
        request = ApprovalRequest.model_validate(req)
        # A decision in LangChain's HITL shape, given past the Runner: nobody vouches for
        # who gave it (see longtask.steps._hitl).
        answer = decision_from_hitl(request, answer, now, by=None)
        return check_decision(request, answer, now, step=step.name)

    def earlier_approval(
        call: NodeCall, state: dict[str, Any], req: dict[str, Any], now: datetime
    ) -> dict[str, Any] | None:
        """A decision this step already holds for exactly this plan (the step runs again on
        a fork from before it): it still counts while younger than ``valid_for``."""
        stored = state.get(result_channel(step.name))
        if stored is None or is_skipped(stored):
            return None
        try:
            decision = Decision.model_validate(env.codec.decode(stored, strict=False))
        except Exception:  # not a decision (a person set the result by hand): ask
            return None
        if not decision.approved or decision.plan_hash != req["plan_hash"]:
            return None
        valid_for = getattr(step, "valid_for", None)
        if valid_for is not None and (now - decision.at).total_seconds() > valid_for:
            return None
        env.store.timer_clear(call.thread_id, step.name)
        env.emit(
            call,
            "approval.resolved",
            call.key(kind, "reused"),
            info,
            data={
                "outcome": "approved",
                "by": decision.by,
                "at": decision.at.isoformat(),
                "plan_hash": decision.plan_hash,
                "reused": True,
            },
        )
        return {result_channel(step.name): stored}

    def ask(state: dict[str, Any], config: RunnableConfig) -> Any:
        call = NodeCall.from_config(config)
        done = state.get(result_channel(step.name))
        if is_skipped(done):
            return {result_channel(step.name): done}  # skipped by the request node
        req = state.get(channel)
        if not isinstance(req, dict):
            raise LongTaskError(f"{kind} {step.name!r} has no recorded request")
        now = env.clock()
        if is_approval and plan_hash(current_plan(state, call)) != req["plan_hash"]:
            env.emit(
                call,
                "approval.expired",
                call.key(kind, "plan-changed"),
                info,
                data={"reason": "plan changed", "plan_hash": req["plan_hash"]},
            )
            return Command(goto=request_node_name(step.name))
        if is_approval:
            reused = earlier_approval(call, state, req, now)
            if reused is not None:
                return reused
        deadline = datetime.fromisoformat(req["deadline"]) if req.get("deadline") else None
        if deadline is not None and now > deadline:
            return timed_out(call, req)
        refused = 0
        shown = approval_value(req) if is_approval else wait_value(req)
        while True:
            answer = interrupt(shown)
            # Resumed: from here on the node runs once per answer.
            now = env.clock()
            try:
                accepted = accept(answer, req, deadline, now)
                break
            except InvalidInput as exc:
                # Answers given through the Runner were checked already; one given past it
                # (LangGraph's own Command) is refused here and the step asks again.
                # LangGraph hands resume values to interrupt() calls in order.
                env.emit(
                    call,
                    f"{kind}.refused",
                    call.key(kind, "refused", refused),
                    info,
                    data={"error": str(exc)},
                )
                refused += 1
        if accepted is TIMEOUT:
            return timed_out(call, req)
        if not isinstance(accepted, Decision):
            payload, by = accepted
            env.store.timer_clear(call.thread_id, step.name)
            env.emit(
                call,
                "wait.resolved",
                call.key(kind, "resolved"),
                info,
                data={"payload": payload, "by": by},
            )
            return {result_channel(step.name): env.codec.encode(payload, f"signal {step.name!r}")}
        assert isinstance(step, ApprovalStep)
        decision = accepted
        if step.valid_for is not None and (now - decision.at).total_seconds() > step.valid_for:
            env.emit(
                call,
                "approval.expired",
                call.key(kind, "stale"),
                info,
                data={"reason": "decision too old", "decided_at": decision.at.isoformat()},
            )
            return Command(goto=request_node_name(step.name))
        env.store.timer_clear(call.thread_id, step.name)
        outcome = "approved" if decision.approved else "rejected"
        env.emit(
            call,
            "approval.resolved",
            call.key(kind, "resolved"),
            info,
            data={
                "outcome": outcome,
                "by": decision.by,
                "at": decision.at.isoformat(),
                "plan_hash": decision.plan_hash,
                "comment": decision.comment,
            },
        )
        if not decision.approved:
            return rejected(call, req, decision, "rejected")
        return {
            result_channel(step.name): env.codec.encode(
                decision.model_dump(mode="json"), f"the decision of {step.name!r}"
            )
        }

    def ask_node(state: dict[str, Any], config: RunnableConfig) -> Any:
        out = ask(state, config)
        if isinstance(out, dict) and result_channel(step.name) in out:
            call = NodeCall.from_config(config)
            step_completed(env, call, info, 1, {})
            return Command(update=out, goto=step.name)
        return out

    def done_node(state: dict[str, Any], config: RunnableConfig) -> Any:
        return {result_channel(step.name): state[result_channel(step.name)]}

    request.__name__ = request_node_name(step.name)
    ask_node.__name__ = ask_node_name(step.name)
    done_node.__name__ = step.name
    return request, ask_node, done_node
