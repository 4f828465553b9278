"""A thread's conversation, as a chat client on the LangGraph Server API reads it from
``values["messages"]``: what a chat UI (Agent Chat UI, useStream) renders and keys by id.

It is built for each checkpoint from what the thread stores, never kept in the task's state
(a message list grows every turn, and a state channel is stored in full at each checkpoint):

- the chat's messages the run was started with (its input ``messages``, kept in the task's
  inputs, each given a stable id when the run is recorded);
- each finished agent step's conversation (its ``<step>.transcript.json``), in the task's
  order, and the one of the agent step running or paused now, read from its own
  checkpoints. Its system message is left out, and so is its prompt when the chat gave the
  input (the prompt then says what the chat said);
- once every step has a result, one closing AI message with the final steps' results,
  unless the last message already says it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException

from longtask.errors import InvalidInput
from longtask.model import AgentStep, GraphStep, Step, graph_kind
from longtask.serve.lgapi._json import plain

if TYPE_CHECKING:
    from longtask._runner import Runner
    from longtask.model import LongTask

#: the run input key a chat client sends its messages in
KEY = "messages"
_ROLES = {"user": "human", "human": "human", "assistant": "ai", "ai": "ai", "system": "system"}


def chat_input(raw: Any, task: LongTask) -> Any:
    """The run's input with its chat messages in LangChain's dict form, each with an id
    (a 422 naming the fix for messages of no known shape, or a task that could not keep
    them)."""
    if not isinstance(raw, dict) or KEY not in raw or KEY in task.steps:
        return raw
    if task.inputs is not None and KEY not in task.inputs.model_fields:
        raise HTTPException(
            422,
            f"task {task.name!r} takes no chat messages: its inputs model "
            f"{task.inputs.__name__} has no field 'messages', so a chat's input would be "
            "lost; add `messages: list[dict] = []` to it to start the task from a chat",
        )
    given = raw[KEY]
    items = [given] if isinstance(given, str | dict) else given
    if not isinstance(items, list):
        raise HTTPException(422, "input messages must be a list of messages")
    return {**raw, KEY: [_message(m) for m in items]}


def _message(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        value = {"type": "human", "content": value}
    if not isinstance(value, dict):
        raise HTTPException(422, f"an input message is a string or an object, not {value!r}")
    kind = _ROLES.get(str(value.get("type") or value.get("role") or "human"))
    if kind is None:
        raise HTTPException(422, f"an input message's type is human, ai or system, not {value!r}")
    out = {k: v for k, v in value.items() if k != "role"}
    out["type"] = kind
    out.setdefault("content", "")
    if not out.get("id"):
        out["id"] = str(uuid.uuid4())
    return out


def converses(step: Step) -> bool:
    """An agent step, or a graph step whose graph has a ``messages`` channel (a factory's
    graph is made when the step runs: it may). A served graph's (``keeps_state``) messages
    are its state's, not a conversation around it."""
    if isinstance(step, AgentStep):
        return True
    if not isinstance(step, GraphStep) or step.keeps_state:
        return False
    if graph_kind(step.graph) == "factory":
        return True
    channels = getattr(step.graph, "channels", None)
    return isinstance(channels, Mapping) and KEY in channels


class Conversation:
    """The conversation of one thread, with the finished agent steps' transcripts read once."""

    def __init__(self, runner: Runner, task: LongTask, thread_id: str) -> None:
        self.runner = runner
        self.task = task
        self.thread_id = thread_id
        self._transcripts: dict[str, list[dict[str, Any]]] = {}
        #: the steps whose messages are the conversation: agent steps, and graph steps
        #: whose graph holds LangChain messages (shown live too, as an agent's)
        self.agents = [n for n, s in task.steps.items() if converses(s)]

    @property
    def shown(self) -> bool:
        """False for a task with a step named ``messages`` (its result is shown there)."""
        return KEY not in self.task.steps

    def messages(
        self,
        inputs: Mapping[str, Any] | None,
        results: Mapping[str, Any],
        live: Iterable[dict[str, Any]] = (),
    ) -> list[dict[str, Any]]:
        """The conversation at a checkpoint whose step results are ``results`` (by step
        name), the thread started with ``inputs``; ``live``: the running or paused agent's
        messages (plain dicts)."""
        given = list((inputs or {}).get(KEY) or []) if isinstance(inputs, Mapping) else []
        out = [full(m) for m in given if isinstance(m, dict)]
        for name in self.agents:
            if name in results:
                out.extend(self._said(self._transcript(name), chat=bool(given)))
        out.extend(self._said(live, chat=bool(given)))
        if self.task.steps and all(name in results for name in self.task.steps):
            closing = self._closing(results)
            last = out[-1] if out else None
            if last is None or last.get("type") != "ai" or last.get("content") != closing:
                out.append(
                    full(
                        {"type": "ai", "id": f"longtask-done-{self.thread_id}", "content": closing}
                    )
                )
        return out

    def finished(self, step: str, messages: list[dict[str, Any]]) -> None:
        """Agent ``step`` is done and said ``messages``: its transcript, without a read."""
        self._transcripts.setdefault(step, messages)

    def said_by(self, step: str) -> list[dict[str, Any]] | None:
        """What finished agent ``step`` said, if known here (without a read)."""
        return self._transcripts.get(step)

    @staticmethod
    def _said(messages: Iterable[dict[str, Any]], *, chat: bool) -> list[dict[str, Any]]:
        return [
            m
            for m in messages
            if m.get("type") != "system" and not (chat and m.get("type") == "human")
        ]

    def _transcript(self, step: str) -> list[dict[str, Any]]:
        if step not in self._transcripts:
            try:
                raw = self.runner.transcript(self.thread_id, step)
            except InvalidInput:
                raw = []  # a step skipped or answered by hand has none
            self._transcripts[step] = messages_json(raw)
        return self._transcripts[step]

    def _closing(self, results: Mapping[str, Any]) -> str:
        """The final steps' results (those no other step depends on), as text."""
        needed = {d for info in self.task.layout.values() for d in info.depends_on}
        final = [n for n in self.task.steps if n not in needed]
        parts = [_text(results[n]) for n in final]
        if len(parts) == 1:
            return parts[0]
        return "\n".join(f"{n}: {p}" for n, p in zip(final, parts, strict=True))


def full(message: dict[str, Any]) -> dict[str, Any]:
    """A message dict with every field a LangChain message of its type dumps (as a client
    reading LangGraph's server finds them), keeping what it has."""
    out = {"additional_kwargs": {}, "response_metadata": {}, "name": None, **message}
    if out.get("type") == "ai":
        out = {"tool_calls": [], "invalid_tool_calls": [], "usage_metadata": None, **out}
    return out


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def messages_json(raw: Iterable[Any]) -> list[dict[str, Any]]:
    """LangChain messages (objects, or ``messages_to_dict``'s ``{"type", "data"}``) as the
    API's message dicts."""
    from langchain_core.messages import BaseMessage, messages_from_dict

    out: list[dict[str, Any]] = []
    for item in raw:
        if isinstance(item, dict) and "data" in item and "type" in item:
            item = messages_from_dict([item])[0]
        if isinstance(item, BaseMessage):
            out.append(plain(item))
        elif isinstance(item, dict):
            out.append(item)
    return out
