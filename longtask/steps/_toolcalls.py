"""Every tool call of a graph step's graph through the effect ledger, with no changed line.

LangGraph's ``ToolNode`` runs the tools of ``create_agent``, of LangChain's middleware and of
deep agents' sub-agents (a ``ToolNode`` of their own, inside the ``task`` tool). While a
graph step runs its graph, each call a ``ToolNode`` makes goes through ``ctx.effect``: a call
that completed is never run again after a crash (its recorded result is the tool's message),
and a call cut off mid-way is settled by how its tool is marked:

- ``"read_only"``: not in the ledger; run again freely;
- ``"idempotent"``: run again with the same idempotency key (``idempotency_key()``, and
  ``config["configurable"]["idempotency_key"]`` in the tool's config and ``ToolRuntime``), so
  an API that deduplicates by it does the call once;
- a function ``reconcile(call: EffectCall)``: asked what happened (the tool's result if the
  call happened, None if not, and then it runs again);
- ``"once"`` (the default): the thread pauses for a person, who sees the call's name,
  arguments and id (``longtask effects resolve``, the page, Agent Inbox).

Marks come from the graph step's ``tools=`` (a tool's name, or ``"*"`` for all of them), else
the tool's own ``metadata={"longtask": MARK}``, else ``"idempotent"`` for a tool that only
runs a sub-agent (a deep agent's ``task``: see below), else ``"*"``, else ``"once"``.

The key is the thread, the step, the checkpoint namespace of the ToolNode's task and the
model's ``tool_call_id`` and arguments. The namespace keeps LangGraph's task ids: they come
from the checkpoint the tools node runs after, so they are the same on every run of that
node after a crash, and differ between two turns (some models number their tool calls
``call_0``, ``call_1`` in every message, so an id alone would name two calls).

A call that runs a graph of its own — a sub-agent, as a deep agent's ``task`` tool does — is
not settled as one call: once a node of that graph starts (the graph's input is checkpointed
by then), the call is marked as one that may run again: LangGraph runs the graph again in
the namespace of the same tool task, while the thread resumes, so it goes on from its own
last checkpoint, and each of its tool calls is in the ledger on its own. Its result is
recorded when it returns. A graph's work is told by its checkpoint namespace, below the
tool call's: a model call the tool makes itself (in the tool call's own namespace) is no
such work, nothing of it is checkpointed, and the call stays one call. A tool that does
nothing but run a sub-agent (deep agents' ``task``) is idempotent unless marked otherwise:
cut off before its sub-agent's first node, it runs again and the sub-agent starts then.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal, Required, cast

from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from longtask.model._canonical import canonical_digest
from longtask.model._graph import TOOL_MARKS
from longtask.steps._context import current_context
from longtask.steps._effects import EffectCall
from longtask.steps._loop import run_coroutine

__all__ = [
    "inner_work",
    "install",
    "is_serialized",
    "tool_calls_ledgered",
    "tool_message_of",
    "tool_record",
]


@dataclasses.dataclass(frozen=True)
class _Active:
    """The graph step whose graph runs now: its tools' marks, and how to clear a started
    call in its ledger."""

    marks: Mapping[str, Any]
    forget: Callable[..., None]


#: the graph step whose graph runs now (None: a ToolNode's calls are its own)
_ACTIVE: ContextVar[_Active | None] = ContextVar("longtask_tool_ledger", default=None)
#: the ledgered tool call running now, told when inner work of its own starts
_RUNNING: ContextVar[_Running | None] = ContextVar("longtask_tool_running", default=None)

#: an effect's record of a tool's answer that is not one ToolMessage (a Command, a list):
#: LangGraph's own serializer, as its saver stores the same values in the graph's state
_SERIALIZED = "langgraph"


class ToolAnswer(TypedDict, total=False):
    """A tool's answer, as the model reads it: what a person settling a cut-off call says
    it returned (or plain text, its content)."""

    content: Required[str | list[Any]]
    status: Literal["success", "error"]


class _Running:
    """A tool call in the ledger while it runs, in checkpoint namespace ``ns`` (its tool
    task's); ``inner`` once a graph of its own ran."""

    def __init__(self, key: str, ns: str, forget: Callable[..., None]) -> None:
        self.key = key
        #: the checkpoint namespace of the ToolNode task the call runs in (with task ids)
        self.ns = ns
        self.forget = forget
        self.ns = ns
        self.inner = False
        self.lock = threading.Lock()


@contextmanager
def tool_calls_ledgered(
    marks: Mapping[str, Any] | None, forget: Callable[..., None]
) -> Iterator[None]:
    """Inside, every ToolNode call goes through the current step's ledger, by ``marks``;
    ``forget(key, why=...)`` clears a started call (the store's ``effect_forget``)."""
    install()
    token = _ACTIVE.set(_Active(dict(marks or {}), forget))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def inner_work(ns: Any) -> None:
    """Work in checkpoint namespace ``ns`` starts (a node, a model call, a tool call): if
    it is a graph's run inside a ledgered tool call (a sub-agent in a ``task`` tool: ``ns``
    is below the call's own), that call is one that may run again, as the graph's work is
    checkpointed and its tool calls are ledgered on their own."""
    running = _RUNNING.get()
    if running is None or not isinstance(ns, str) or not ns.startswith(running.ns + "|"):
        return
    with running.lock:
        if running.inner:
            return
        running.inner = True
    running.forget(
        running.key,
        why="runs a graph of its own (checkpointed, its tool calls in the ledger): "
        "called again after a crash",
    )


def mark_of(name: str, tool: Any, marks: Mapping[str, Any]) -> Any:
    """How a cut-off call of tool ``name`` is settled (see the module)."""
    if name in marks:
        return marks[name]
    own = (getattr(tool, "metadata", None) or {}).get("longtask")
    if own is not None:
        if own not in TOOL_MARKS and not callable(own):
            raise ValueError(
                f'tool {name!r} has metadata {{"longtask": {own!r}}}; use one of '
                f"{', '.join(map(repr, TOOL_MARKS))} or a reconcile function"
            )
        return own
    if _runs_a_subagent(tool):
        return "idempotent"
    return marks.get("*", "once")


#: modules whose tools run a sub-agent and do nothing else (deep agents' ``task`` tool)
_SUBAGENT_TOOLS = ("deepagents.middleware.subagents",)


def _runs_a_subagent(tool: Any) -> bool:
    """Whether ``tool`` is one that only runs a sub-agent: cut off, it runs again, whether its
    sub-agent had started (it goes on from its checkpoints) or not (it starts)."""
    for fn in (getattr(tool, "func", None), getattr(tool, "coroutine", None)):
        if getattr(fn, "__module__", None) in _SUBAGENT_TOOLS:
            return True
    return False


def tool_record(out: Any) -> dict[str, Any]:
    """A tool's answer as the ledger keeps it: a ToolMessage's content and status (what a
    person reads), anything else (a ``Command``, a list) in LangGraph's serialized form."""
    from langchain_core.messages import ToolMessage

    if isinstance(out, ToolMessage):
        record: dict[str, Any] = {"content": out.content, "status": out.status}
        if out.artifact is not None:
            try:
                json.dumps(out.artifact)
                record["artifact"] = out.artifact
            except (TypeError, ValueError):
                return _serialized(out)
        return record
    return _serialized(out)


def _serialized(out: Any) -> dict[str, Any]:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    kind, data = JsonPlusSerializer().dumps_typed(out)
    return {_SERIALIZED: kind, "data": base64.b64encode(data).decode("ascii")}


def is_serialized(record: Any) -> bool:
    """Whether ``record`` holds a tool's answer in LangGraph's serialized form."""
    return isinstance(record, dict) and _SERIALIZED in record and "data" in record


def tool_message_of(record: Any, name: str, tool_call_id: str) -> Any:
    """The tool's answer again from its record (or from what a reconciler or a person said
    it returned: a ToolMessage, a ``{"content", "status"}`` record, or a plain value)."""
    from langchain_core.messages import ToolMessage

    if isinstance(record, ToolMessage):
        return record
    if is_serialized(record):
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        raw = base64.b64decode(record["data"])
        return JsonPlusSerializer().loads_typed((record[_SERIALIZED], raw))
    if isinstance(record, dict) and "content" in record:
        content, status = record["content"], record.get("status") or "success"
        artifact = record.get("artifact")
    else:
        content, status, artifact = record, "success", None
    if not isinstance(content, (str, list)):
        content = json.dumps(content, default=str)
    return ToolMessage(
        content, tool_call_id=tool_call_id, name=name, status=status, artifact=artifact
    )


def _with_key(request: Any, config: Any, key: str) -> tuple[Any, Any]:
    """The request and config of a call, with its idempotency key in the config the tool
    and its ``ToolRuntime`` get."""
    conf = {
        **config,
        "configurable": {**(config.get("configurable") or {}), "idempotency_key": key},
    }
    runtime = getattr(request, "runtime", None)
    if runtime is not None and dataclasses.is_dataclass(runtime) and not isinstance(runtime, type):
        request = dataclasses.replace(request, runtime=dataclasses.replace(runtime, config=conf))
    return request, conf


def _ledgered_call(request: Any, config: Any, execute: Callable[[Any, Any], Any]) -> Any:
    """One ToolNode call through the current step's ledger (see the module)."""
    active = _ACTIVE.get()
    call = request.tool_call
    tool = request.tool
    if active is None or tool is None or getattr(tool, "longtask_ledgered", False):
        # an unknown tool (ToolNode answers the model with an error) or one that is
        # `ledgered` already (it keeps its own record)
        return execute(request, config)
    name = str(call["name"])
    mark = mark_of(name, tool, active.marks)
    if mark == "read_only":
        return execute(request, config)
    full_ns = str((config.get("configurable") or {}).get("checkpoint_ns") or "")
    inner_work(full_ns)
    args = dict(call.get("args") or {})
    tool_call_id = str(call.get("id") or "")
    key = f"{full_ns}|{tool_call_id}|{canonical_digest(args, f'the arguments of tool {name!r}')}"
    if mark == "idempotent":
        reconcile: Callable[[EffectCall], Any] | None = _not_found
    elif callable(mark):
        reconcile = _reconciler(mark, name, tool_call_id)
    else:
        reconcile = None

    # Its return annotation is the result a person settling a cut-off call is shown to give.
    def perform(idempotency_key: str, **_args: Any) -> ToolAnswer:
        running = _Running(idempotency_key, full_ns, active.forget)
        token = _RUNNING.set(running)
        try:
            req, conf = _with_key(request, config, idempotency_key)
            return cast(ToolAnswer, tool_record(execute(req, conf)))
        finally:
            _RUNNING.reset(token)

    record = current_context()._effects(  # type: ignore[misc]
        f"tool:{name}",
        perform,
        (),
        args,
        reconcile,
        key,
        tool_call_id=tool_call_id or None,
        shown={"tool": name, "args": args, "tool_call_id": tool_call_id},
    )
    return tool_message_of(record, name, tool_call_id)


def _not_found(_call: EffectCall) -> None:
    """An idempotent tool's cut-off call: run it again, with the same key."""
    return None


def _reconciler(fn: Callable[[EffectCall], Any], name: str, tool_call_id: str) -> Any:
    """``fn``, whose answer (the tool's result: a ToolMessage, its content, or None) is kept
    as the ledger keeps a tool's answer."""

    def reconcile(call: EffectCall) -> Any:
        found = fn(call)
        if found is None:
            return None
        return tool_record(tool_message_of(found, name, tool_call_id))

    return reconcile


_install_lock = threading.Lock()
_installed: list[bool] = []


def install() -> None:
    """Route ToolNode's calls through ``_ledgered_call`` while a graph step runs (a
    context variable says so; elsewhere ToolNode runs as LangGraph wrote it). Below every
    ``wrap_tool_call`` middleware, so a retry middleware's second call is a second try of
    the same ledgered call (a failed call may run again)."""
    with _install_lock:
        if _installed:
            return
        from langgraph.prebuilt.tool_node import ToolNode

        sync_run = ToolNode._execute_tool_sync
        async_run = ToolNode._execute_tool_async

        def execute_sync(self: Any, request: Any, input_type: Any, config: Any) -> Any:
            if _ACTIVE.get() is None:
                return sync_run(self, request, input_type, config)
            return _ledgered_call(
                request, config, lambda req, conf: sync_run(self, req, input_type, conf)
            )

        async def execute_async(self: Any, request: Any, input_type: Any, config: Any) -> Any:
            if _ACTIVE.get() is None:
                return await async_run(self, request, input_type, config)

            def run(req: Any, conf: Any) -> Any:
                # on a worker thread (the ledger writes synchronously): the tool's coroutine
                # back on the process's loop
                return run_coroutine(lambda: async_run(self, req, input_type, conf))

            return await asyncio.to_thread(_ledgered_call, request, config, run)

        ToolNode._execute_tool_sync = execute_sync  # type: ignore[method-assign]
        ToolNode._execute_tool_async = execute_async  # type: ignore[method-assign]
        _installed.append(True)
