"""The node of an agent step: a LangChain agent (``create_agent`` over ``ChatOpenAI``) run as
a subgraph of the task's graph.

The agent is invoked from inside the step's node with the node's config, so LangGraph
checkpoints it in the same thread under the node's namespace: when the thread is resumed
after a crash, the agent continues after its last completed model or tool call instead of
starting over (a resumed parent resumes its subgraphs).

A middleware wraps every model call and every tool call:

- model calls: the budget and cancel are checked first; errors are classified and retried
  like a step's attempts (429 waits for ``Retry-After``); each call is a ``model.call``
  event (models requested and reported, prompt, usage, cost, latency, finish reason,
  response id) and its tokens and cost are charged to the thread's budget;
- tool calls: tools in ``tool_approvals`` wait for a person (the decision is bound to the
  hash of the tool's name and arguments); every call goes through the effect ledger, keyed
  by the tool call's id and arguments, so a resumed agent never repeats one; a tool that
  raises ``InvalidInput`` hands the error back to the model (at most ``max_tool_errors``).

Nothing secret passes through here: ``ChatOpenAI`` reads ``OPENAI_API_KEY`` and
``OPENAI_BASE_URL`` from the environment itself.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp
from langgraph.types import Command, interrupt
from pydantic import ValidationError
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from longtask.errors import InvalidInput, LongTaskError, PermissionDenied, describe_validation
from longtask.model import AgentStep, ApprovalRequest, Decision, Retry, StepInfo
from longtask.model._decision import plan_hash
from longtask.steps._attempts import (
    CONTROL,
    check_limits,
    describe,
    gate,
    permission_request,
    with_retries,
)
from longtask.steps._classify import classify
from longtask.steps._context import _CURRENT, StepContext, result_channel
from longtask.steps._effects import run_effect
from longtask.steps._function import (
    NodeCall,
    StepEnv,
    attempt_done,
    first_attempt,
    step_completed,
    step_failed,
    step_started,
)
from longtask.steps._hitl import TOOL_ALLOWED, decision_from_hitl, with_hitl
from longtask.steps._prices import cost_of
from longtask.steps._tracing import set_attributes, span

DEFAULT_MODEL = "gpt-4o-mini"
#: model calls of a step without a retry policy: rate limits and outages are normal
_DEFAULT_MODEL_RETRY = Retry(max_attempts=5, initial_wait=1.0, backoff=2.0, max_wait=60.0)


def fix_channel(step: str) -> str:
    """State of a step's fix loop: ``{"round", "failure", "fix"}``."""
    return f"fix.{step}"


class ToolRecord(TypedDict):
    """What a tool call records in the effect ledger: what a person settling a call cut off
    mid-way gives as its result (the tool's output, and whether it succeeded)."""

    content: str | list[Any]
    status: Literal["success", "error"]


class _Json(dict):  # type: ignore[type-arg]
    """A dict result in a prompt: formats as JSON, indexes like a dict."""

    def __format__(self, spec: str) -> str:
        return json.dumps(self, default=str, ensure_ascii=False)


class _JsonList(list):  # type: ignore[type-arg]
    def __format__(self, spec: str) -> str:
        return json.dumps(self, default=str, ensure_ascii=False)


class PromptValues(Mapping[str, Any]):
    """What a prompt template may name: ``inputs``, dependency results, and extras."""

    def __init__(self, ctx: StepContext, extras: Mapping[str, Any]) -> None:
        self._ctx, self._extras = ctx, extras

    def __getitem__(self, key: str) -> Any:
        if key == "inputs":
            return self._ctx.inputs
        if key in self._extras:
            return self._extras[key]
        if key in self._ctx.info.ancestors:
            value = self._ctx.result(key)
            if isinstance(value, dict):
                return _Json(value)
            if isinstance(value, list):
                return _JsonList(value)
            return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(["inputs", *self._extras, *sorted(self._ctx.info.ancestors)])

    def __len__(self) -> int:
        return 1 + len(self._extras) + len(self._ctx.info.ancestors)


def render_prompt(
    step: AgentStep, ctx: StepContext, extras: Mapping[str, Any]
) -> tuple[str | None, str]:
    try:
        return step.prompt.render(PromptValues(ctx, extras))
    except (KeyError, AttributeError, IndexError) as exc:
        names = ", ".join(["inputs", *extras, *sorted(ctx.info.ancestors)])
        raise InvalidInput(
            f"prompt {step.prompt.name!r} v{step.prompt.version} of step {step.name!r} uses "
            f"{exc}, which it cannot see (it can use: {names})"
        ) from exc


def model_name(step: AgentStep, task_model: str | None) -> str:
    model = step.model
    if isinstance(model, str):
        return model
    if model is not None:
        return _name_of(model)
    return task_model or os.environ.get("LONGTASK_MODEL") or DEFAULT_MODEL


def _name_of(model: Any) -> str:
    """The model name a chat model object carries (ChatOpenAI: ``model_name``)."""
    for attr in ("model_name", "model"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return "custom"


def chat_model(step: AgentStep, name: str) -> Any:
    """The chat model of one run of the step, built now so the environment of this process
    (key, base URL) applies."""
    model = step.model
    if model is not None and not isinstance(model, str):
        return model() if callable(model) and not hasattr(model, "invoke") else model
    if not os.environ.get("OPENAI_API_KEY"):
        raise PermissionDenied(
            f"agent step {step.name!r} needs OPENAI_API_KEY (and OPENAI_BASE_URL for an "
            "OpenAI-compatible server such as vLLM, Ollama or LiteLLM); set it and run "
            "`longtask retry THREAD`"
        )
    from langchain_openai import ChatOpenAI

    # Retries are ours (by error class, with the injected clock), not the client's. A run
    # whose client streams messages streams the model's answer: its usage is asked for too,
    # or a custom base URL's stream would report none and the call would cost nothing.
    return ChatOpenAI(model=name, max_retries=0, timeout=step.timeout, stream_usage=True)


class AgentRun:
    """One run of an agent step's node: the middleware's state and its hooks."""

    def __init__(
        self, env: StepEnv, call: NodeCall, info: StepInfo, step: AgentStep, model: str
    ) -> None:
        self.env, self.call, self.info, self.step, self.model = env, call, info, step, model
        self.model_calls = 0
        self.tool_calls = 0
        self.tokens = 0
        self.cost = 0.0
        #: a call whose model has no price: the run's cost is unknown, not 0
        self.cost_unknown = False

    def middleware(self) -> Any:
        from langchain.agents.middleware import AgentMiddleware

        run = self

        class LongTaskMiddleware(AgentMiddleware):
            def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
                return run.model_call(request, handler)

            def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
                return run.tool_call(request, handler)

        return LongTaskMiddleware()

    # -- model calls -------------------------------------------------------------------------

    def model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        from langchain_core.messages import AIMessage

        turn = sum(1 for m in request.messages if isinstance(m, AIMessage))
        if turn >= self.step.max_turns:
            raise InvalidInput(
                f"agent step {self.step.name!r} made {turn} model calls (max_turns) without a "
                "final answer; raise max_turns or narrow the prompt"
            )

        def attempt(n: int) -> tuple[Any, float]:
            started = time.monotonic()
            return handler(request), time.monotonic() - started

        with span(
            "longtask.model_call",
            thread_id=self.call.thread_id,
            stage=self.info.stage,
            step=self.info.name,
            call=turn + 1,
            model=self.model,
        ):
            # Attempts of model call n are kept apart from the step's own (negative "items").
            (response, latency), attempt_no = with_retries(
                self.env,
                self.call,
                self.info,
                self.step.retry or _DEFAULT_MODEL_RETRY,
                attempt,
                item=-2 - turn,
                extra={"model_call": turn + 1},
            )
            set_attributes(attempt=attempt_no)
            self._record(turn, response, latency, attempt_no)
        return response

    def _record(self, turn: int, response: Any, latency: float, attempt: int) -> None:
        message = next(iter(getattr(response, "result", None) or [response]), None)
        usage = dict(getattr(message, "usage_metadata", None) or {})
        meta = dict(getattr(message, "response_metadata", None) or {})
        reported = meta.get("model_name") or meta.get("model")
        tokens_in = int(usage.get("input_tokens", 0) or 0)
        tokens_out = int(usage.get("output_tokens", 0) or 0)
        total = int(usage.get("total_tokens", tokens_in + tokens_out) or 0)
        cost = cost_of(reported or self.model, tokens_in, tokens_out, self.step.prices)
        self.model_calls += 1
        self.tokens += total
        self.cost += cost or 0.0
        self.cost_unknown = self.cost_unknown or cost is None
        self.env.emit(
            self.call,
            "model.call",
            self.call.key("model.call", turn),
            self.info,
            attempt=attempt,
            data={
                "call": turn + 1,
                "model_requested": self.model,
                "model": reported,
                "prompt": self.step.prompt.name,
                "prompt_version": self.step.prompt.version,
                "usage": {"input": tokens_in, "output": tokens_out, "total": total},
                "cost": cost,
                "latency": round(latency, 4),
                "finish_reason": meta.get("finish_reason"),
                "response_id": meta.get("id") or getattr(message, "id", None),
                "tool_calls": len(getattr(message, "tool_calls", None) or []),
            },
            # Paid by the write that stores the event (see Charge): no transaction of its own.
            charge=self.env.charge_for(self.call, self.info, total, cost or 0.0, model_calls=1),
        )

    # -- tool calls --------------------------------------------------------------------------

    def tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        tc = request.tool_call
        with span(
            "longtask.tool_call",
            thread_id=self.call.thread_id,
            stage=self.info.stage,
            step=self.info.name,
            tool=tc["name"],
        ):
            return self._tool_call(request, handler)

    def _tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        from langchain_core.messages import ToolMessage

        tc = request.tool_call
        name, args, tool_call_id = tc["name"], tc.get("args") or {}, tc.get("id") or ""
        policy = self.step.tool_approvals.get(name)
        if policy is not None:
            decision = self._approve(name, args, tool_call_id, policy, request.tool)
            if decision.response is not None:
                # Answered in the tool's place: the person's text is its result.
                return ToolMessage(
                    decision.response, tool_call_id=tool_call_id, name=name, status="success"
                )
            if not decision.approved:
                why = f" ({decision.comment})" if decision.comment else ""
                if policy.on_reject == "fail":
                    raise InvalidInput(f"{decision.by} rejected the call to {name}{why}")
                refusal = f"The call to {name} was rejected by {decision.by}{why}. "
                return ToolMessage(
                    refusal + "Do not retry it as is.",
                    tool_call_id=tool_call_id,
                    name=name,
                    status="error",
                )
            if decision.edited_args is not None:
                # The corrected call runs (and is what the ledger records), never the
                # model's: the decision is bound to these arguments by their hash.
                args = decision.edited_args
                request = request.override(tool_call={**tc, "args": args})
        # After the approval: a budget pause's answer is never taken for a decision (LangGraph
        # hands a node's resume values to its interrupt() calls in order).
        check_limits(self.env, self.call, self.info)

        if name in self.step.read_only_tools:
            self.env.store.charge(
                self.call.thread_id,
                step=self.info.name,
                ancestors=self.env.ancestors_of(self.call.thread_id),
                tool_calls=1,
            )
            self.tool_calls += 1
            return handler(request)

        def perform(_id: str, _args: Any) -> ToolRecord:
            # Charged when the tool really runs (a replay from the ledger costs nothing).
            self.env.store.charge(
                self.call.thread_id,
                step=self.info.name,
                ancestors=self.env.ancestors_of(self.call.thread_id),
                tool_calls=1,
            )
            out = handler(request)
            if isinstance(out, ToolMessage):
                return {"content": out.content, "status": out.status}
            return {"content": str(out), "status": "success"}

        try:
            record = run_effect(
                self.env,
                self.call,
                self.info,
                f"tool:{name}",
                perform,
                (tool_call_id, args),
                {},
                None,
            )
        except (GraphBubbleUp, *CONTROL):
            raise
        except InvalidInput as exc:
            # The model can correct its arguments; a bounded number of times.
            errors = sum(
                1
                for m in request.state.get("messages", ())
                if isinstance(m, ToolMessage) and m.status == "error"
            )
            if errors >= self.step.max_tool_errors:
                raise
            self.tool_calls += 1
            return ToolMessage(
                f"Error: {exc}. Correct the arguments and try again.",
                tool_call_id=tool_call_id,
                name=name,
                status="error",
            )
        self.tool_calls += 1
        self.env.emit(
            self.call,
            "tool.call",
            self.call.key("tool.call", tool_call_id),
            self.info,
            data={"tool": name, "tool_call_id": tool_call_id, "status": "recorded"},
        )
        if not isinstance(record, dict):  # resolved by a person with a plain value
            record = {"content": record, "status": "success"}
        content = record.get("content")
        return ToolMessage(
            content if isinstance(content, (str, list)) else json.dumps(content),
            tool_call_id=tool_call_id,
            name=name,
            status=record.get("status") or "success",
        )

    def _approve(self, name: str, args: Any, tool_call_id: str, policy: Any, tool: Any) -> Decision:
        """Pause for a person's decision on this exact call: approve, edit (the tool's
        arguments corrected, checked against its schema), reject or respond (an answer in
        the tool's place)."""
        from longtask.steps._pause import check_decision

        plan = {"tool": name, "args": args}
        req = ApprovalRequest(
            step=self.info.name,
            plan=plan,
            plan_hash=plan_hash(plan),
            approvers=list(policy.approvers) if policy.approvers else None,
            requested_at=self.env.clock(),
            valid_for=policy.valid_for,
        )
        value = with_hitl(
            {**req.model_dump(mode="json"), "tool": name, "tool_call_id": tool_call_id},
            name,
            args if isinstance(args, dict) else {"args": args},
            f"Allow the call to tool {name!r} of agent step {self.info.name!r}",
            TOOL_ALLOWED,
        )
        key = f"tool.approval/{self.info.name}/{tool_call_id}"
        if self.env.first_time(self.call.thread_id, key):
            self.env.emit(self.call, "approval.required", key, self.info, data=value)
        answer = interrupt(value)
        while True:
            try:
                answer = decision_from_hitl(
                    req,
                    answer,
                    self.env.clock(),
                    by=None,
                    plan_of=lambda edited: {"tool": name, "args": edited},
                    tool=True,
                )
                decision = check_decision(
                    req, answer, self.env.clock(), step=self.info.name, tool=True
                )
                if decision.edited_args is not None:
                    _check_arguments(tool, name, decision.edited_args)
                break
            except InvalidInput as exc:
                # An answer given through LangGraph directly that does not fit: ask again.
                self.env.emit(
                    self.call,
                    "approval.refused",
                    self.call.key("approval.refused", tool_call_id, time.time_ns()),
                    self.info,
                    data={"error": str(exc), "tool": name},
                )
                answer = interrupt({**value, "refused": str(exc)})
        self.env.emit(
            self.call,
            "approval.resolved",
            f"tool.approval.resolved/{self.info.name}/{tool_call_id}",
            self.info,
            data={
                "tool": name,
                "approved": decision.approved,
                "decision": decision.outcome,
                "by": decision.by,
                "plan_hash": decision.plan_hash,
                **({"edited_args": decision.edited_args} if decision.edited_args else {}),
                **({"edited_hash": decision.edited_hash} if decision.edited_hash else {}),
            },
        )
        return decision


def _check_arguments(tool: Any, name: str, args: dict[str, Any]) -> None:
    """Corrected arguments must fit the tool's own argument schema (the one the model is
    shown), as the model's would; InvalidInput says what does not."""
    from pydantic import BaseModel

    schema = getattr(tool, "tool_call_schema", None)
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return  # a JSON-schema tool checks its arguments when it runs
    try:
        schema.model_validate(args)
    except ValidationError as exc:
        raise InvalidInput(
            f"the corrected arguments of {name!r} do not fit the tool: {describe_validation(exc)}"
        ) from None


def run_agent(
    step: AgentStep,
    info: StepInfo,
    env: StepEnv,
    task_model: str | None,
    state: Mapping[str, Any],
    config: RunnableConfig,
    extras: Mapping[str, Any],
) -> Any:
    """Run (or continue) the agent and return its answer."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage, messages_to_dict

    call = NodeCall.from_config(config)
    # A fix agent runs once per round: its events say which.
    rounds = {"fix_round": extras["round"]} if "round" in extras else {}
    # Numbered after an attempt a dead process abandoned (as a function step's are).
    attempt = first_attempt(env, call, info)
    step_started(env, call, info, attempt, rounds or None)
    started = time.monotonic()
    requested = model_name(step, task_model)
    ctx = env.context(call, info, state)
    # The model factory and the agent's tools may read current_context().
    token = _CURRENT.set(ctx)
    try:
        check_limits(env, call, info)
        system, user = render_prompt(step, ctx, extras)
        model = chat_model(step, requested)
        # A factory's model is named only once built (a ChatOpenAI knows its model name).
        name = requested if isinstance(step.model, str) or step.model is None else _name_of(model)
        run = AgentRun(env, call, info, step, name)
        agent = create_agent(
            model,
            list(step.tools),
            system_prompt=system,
            middleware=[run.middleware()],
            response_format=step.response_format,
            name=step.name,
        )
        env.emit(
            call,
            "agent.run.started",
            call.key("agent.run.started"),
            info,
            data={
                "model": name,
                "prompt": step.prompt.name,
                "version": step.prompt.version,
                # where LangGraph keeps the agent's checkpoints (its conversation)
                "checkpoint_ns": (config.get("metadata") or {}).get("langgraph_checkpoint_ns"),
            },
        )
        # Two super-steps per turn, plus the middleware's: a limit of the agent's own.
        sub: RunnableConfig = {**config, "recursion_limit": 4 * step.max_turns + 10}
        out = agent.invoke({"messages": [HumanMessage(user)]}, sub)
    except (GraphBubbleUp, *CONTROL):
        raise
    except Exception as exc:
        if classify(exc, env.clock()).error_class == "permission":
            # A missing key, a revoked one, a tool without access: a person fixes it.
            gate(permission_request(exc, call, info))
        step_failed(env, call, info, exc)
        raise
    finally:
        _CURRENT.reset(token)
    structured = out.get("structured_response")
    if structured is not None:
        answer: Any = (
            structured.model_dump(mode="json") if hasattr(structured, "model_dump") else structured
        )
    else:
        last = out["messages"][-1]
        answer = last.content if isinstance(last.content, str) else last.text()
    transcript = json.dumps(messages_to_dict(out["messages"]), default=str).encode()
    artifact = env.artifact(
        call, info, f"{step.name}.transcript.json", transcript, "application/json"
    )
    env.emit(
        call,
        "agent.run.completed",
        call.key("agent.run.completed"),
        info,
        data={
            "model": name,
            # counted in this process: calls made before a crash are in model.call events
            "model_calls": run.model_calls,
            "tool_calls": run.tool_calls,
            "tokens": run.tokens,
            # None when a call's model has no price (its model.call says so too)
            "cost": None if run.cost_unknown else round(run.cost, 6),
            "messages": len(out["messages"]),
            "transcript": artifact.name,
        },
    )
    took = {"duration": round(time.monotonic() - started, 6), **rounds}
    attempt_done(env, call, info)
    step_completed(env, call, info, attempt, took)
    return answer


def agent_node(
    step: AgentStep, info: StepInfo, env: StepEnv, task_model: str | None
) -> Callable[[dict[str, Any], RunnableConfig], dict[str, Any]]:
    channel = result_channel(step.name)

    def node(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        answer = run_agent(step, info, env, task_model, state, config, {})
        return {channel: env.codec.encode(answer, f"the result of step {step.name!r}")}

    node.__name__ = step.name
    return node


def fix_agent_node(
    step: AgentStep, info: StepInfo, env: StepEnv, task_model: str | None, fixes: str
) -> Callable[[dict[str, Any], RunnableConfig], Command[Any]]:
    """The agent of ``fixes``'s fix loop: it gets the failure, then the step runs again."""
    channel = fix_channel(fixes)

    def node(state: dict[str, Any], config: RunnableConfig) -> Command[Any]:
        loop = dict(state.get(channel) or {})
        extras = {"failure": loop.get("failure", ""), "round": loop.get("round", 1)}
        answer = run_agent(step, info, env, task_model, state, config, extras)
        return Command(update={channel: {**loop, "fix": answer}}, goto=f"{fixes}.run")

    node.__name__ = f"{fixes}.fix"
    return node


__all__ = ["LongTaskError", "agent_node", "describe", "fix_agent_node", "fix_channel"]
