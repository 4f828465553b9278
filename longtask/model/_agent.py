"""Agent steps, versioned prompts, tool approvals and fix loops. Pure pydantic: the LangChain
agent is built by ``longtask.steps`` when the step first runs."""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from longtask.model._notify import Notify
from longtask.model._steps import Retry, Step, _as_retry, _qualname


class Prompt(BaseModel):
    """A versioned prompt: ``template`` is rendered with ``str.format`` from the task inputs
    (``{inputs.topic}`` or ``{inputs[topic]}``), the results of the steps the agent depends
    on (``{analysis}``) and, in a fix loop, ``{failure}`` and ``{round}``. ``system`` is the
    system prompt. Every model call records the prompt's name and version."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    version: str = "1"
    template: str
    system: str | None = None

    def fields(self) -> set[str]:
        """Top-level names the templates use."""
        out: set[str] = set()
        for text in (self.template, self.system or ""):
            for _, field, _, _ in string.Formatter().parse(text):
                if field:
                    out.add(field.split(".", 1)[0].split("[", 1)[0])
        return out

    def render(self, values: Mapping[str, Any]) -> tuple[str | None, str]:
        """(system prompt, user message)."""
        system = self.system.format_map(values) if self.system else None
        return system, self.template.format_map(values)


class ToolApproval(BaseModel):
    """A tool call that waits for a person first: the decision is bound to the hash of the
    tool's name and exact arguments. On rejection the model is told (``on_reject="tell"``)
    and may try something else, or the step fails (``"fail"``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    approvers: tuple[str, ...] | None = None
    valid_for: float | None = None
    on_reject: Literal["tell", "fail"] = "tell"

    @field_validator("valid_for", mode="before")
    @classmethod
    def _seconds(cls, v: Any) -> Any:
        return v.total_seconds() if isinstance(v, timedelta) else v


def _tool_name(tool: Any) -> str:
    return str(getattr(tool, "name", None) or getattr(tool, "__name__", None) or repr(tool))


class AgentStep(Step):
    """An LLM agent (LangChain ``create_agent`` over ``ChatOpenAI``) run as a subgraph whose
    checkpoints live in the thread: a crash resumes it at its next model or tool call."""

    kind: Literal["agent"] = "agent"
    prompt: Prompt
    #: model name for ``ChatOpenAI`` (default: the task's ``model``, ``$LONGTASK_MODEL``,
    #: then ``gpt-4o-mini``), or a chat model object / a factory returning one
    model: Any = None
    tools: tuple[Any, ...] = ()
    max_turns: int = 25
    response_format: Any = None
    tool_approvals: dict[str, ToolApproval] = Field(default_factory=dict)
    #: tools that change nothing outside (lookups, reads): not recorded in the effect ledger,
    #: simply run again if a crash cut them off
    read_only_tools: frozenset[str] = frozenset()
    #: tool errors of class InvalidInput handed back to the model before the step fails
    max_tool_errors: int = 3
    #: price per million tokens (input, output) by model name; overrides the built-in table
    prices: dict[str, tuple[float, float]] | None = None

    def tool_names(self) -> list[str]:
        return [_tool_name(t) for t in self.tools]

    def problems(self) -> list[str]:
        out = super().problems()
        if self.max_turns < 1:
            out.append(f"step {self.name!r}: max_turns must be at least 1")
        names = self.tool_names()
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            out.append(f"step {self.name!r}: duplicate tool names {dupes}")
        unknown = sorted((set(self.tool_approvals) | self.read_only_tools) - set(names))
        if unknown:
            out.append(
                f"step {self.name!r}: tool_approvals or read_only_tools name tools it does not "
                f"have: {unknown} "
                f"(tools: {names})"
            )
        return out

    def spec(self) -> dict[str, Any]:
        fmt = self.response_format
        return {
            **super().spec(),
            "prompt": [self.prompt.name, self.prompt.version],
            "model": self.model
            if isinstance(self.model, str) or self.model is None
            else _qualname(self.model),
            "tools": sorted(self.tool_names()),
            "max_turns": self.max_turns,
            "response_format": None if fmt is None else _qualname(fmt),
            "tool_approvals": {k: v.model_dump() for k, v in sorted(self.tool_approvals.items())},
            "read_only_tools": sorted(self.read_only_tools),
        }


def agent_step(
    name: str,
    *,
    prompt: Prompt | str,
    model: Any = None,
    tools: Sequence[Any] = (),
    after: Sequence[str] | str = (),
    max_turns: int = 25,
    response_format: Any = None,
    tool_approvals: Mapping[str, ToolApproval | bool] | None = None,
    read_only_tools: Sequence[str] = (),
    retry: Retry | int | None = None,
    timeout: float | timedelta | None = None,
    max_tool_errors: int = 3,
    prices: Mapping[str, tuple[float, float]] | None = None,
    compensate: Callable[..., Any] | None = None,
    notify: Notify | str | Sequence[str] | None = None,
) -> AgentStep:
    """An agent step: the model works with ``tools`` from ``prompt`` until it answers (at
    most ``max_turns`` model calls). Its result is the final answer (or the
    ``response_format`` object as a dict); the transcript is kept beside it.

    ``retry`` governs each model call (429 waits for ``Retry-After``, 5xx and connection
    errors back off, 400 fails); ``timeout`` is the timeout of one model call in seconds.
    Every tool call goes through the effect ledger, so a resumed agent never repeats one,
    except ``read_only_tools`` (they change nothing, so running one again is harmless);
    tools in ``tool_approvals`` wait for a person first (``notify``: who is told).
    """
    if isinstance(prompt, str):
        prompt = Prompt(name=name, template=prompt)
    approvals = {
        k: (v if isinstance(v, ToolApproval) else ToolApproval())
        for k, v in (tool_approvals or {}).items()
        if v
    }
    return AgentStep(
        name=name,
        prompt=prompt,
        model=model,
        tools=tuple(tools),
        after=after,  # type: ignore[arg-type]  # normalised by the validator
        max_turns=max_turns,
        response_format=response_format,
        tool_approvals=approvals,
        read_only_tools=frozenset(read_only_tools),
        retry=_as_retry(retry),
        timeout=timeout,  # type: ignore[arg-type]  # normalised by the validator
        max_tool_errors=max_tool_errors,
        prices=dict(prices) if prices else None,
        compensate=compensate,
        notify=notify,  # type: ignore[arg-type]  # normalised by the validator
    )


class FixLoop(BaseModel):
    """``on_failure`` of a function step: when it fails, ``agent`` gets the failure
    (``{failure}``, ``{round}`` in its prompt) and tries to fix the cause, then the step runs
    again; after ``max_rounds`` fixes the task fails, or (``on_exhausted="ask"``) pauses for
    a person."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")

    agent: AgentStep
    max_rounds: int = 3
    on_exhausted: Literal["fail", "ask"] = "fail"

    def problems(self, step: str) -> list[str]:
        out = [f"fix agent of {step!r}: {p}" for p in self.agent.problems()]
        if self.max_rounds < 1:
            out.append(f"step {step!r}: fix_with max_rounds must be at least 1")
        return out

    def spec(self) -> dict[str, Any]:
        return {
            "agent": self.agent.spec(),
            "max_rounds": self.max_rounds,
            "on_exhausted": self.on_exhausted,
        }


def fix_with(
    agent: AgentStep, max_rounds: int = 3, *, on_exhausted: Literal["fail", "ask"] = "fail"
) -> FixLoop:
    """A fix loop for ``function_step(..., on_failure=fix_with(agent_step(...)))``."""
    if not isinstance(agent, AgentStep):
        raise TypeError(
            f"fix_with needs an agent_step(...), got {agent!r}; define the fixing agent with "
            "agent_step(name, prompt=..., tools=...) and pass it here"
        )
    return FixLoop(agent=agent, max_rounds=max_rounds, on_exhausted=on_exhausted)
