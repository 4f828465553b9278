"""``ledgered``: a tool (or any function) whose calls go through the effect ledger, for
graphs of the user's own run as graph steps.

An agent step puts every tool call through the ledger itself; a graph step runs code it
does not own, so a tool with side effects opts in: wrapped, a call that succeeded is
recorded, and a resumed graph that makes the same call again (LangGraph re-runs a node that
had not finished) gets the recorded result instead of a second call. A call made as a
model's tool call is keyed by the tool call's id (which is stored with the model's message,
so it is the same after a crash) and its arguments; a plain call by its arguments. A tool
that only reads needs nothing.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from longtask.model._canonical import canonical_digest
from longtask.steps._context import current_context
from longtask.steps._effects import EffectCall
from longtask.steps._loop import run_coroutine
from longtask.steps._toolcalls import is_serialized, tool_message_of, tool_record

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["ledgered"]


def _tool_call(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict) and value.get("type") == "tool_call" and "id" in value:
        return value
    return None


def _ledgered_tool(tool: Any, name: str, reconcile: Callable[[EffectCall], Any] | None) -> Any:
    from langchain_core.tools import BaseTool

    inner = tool

    class LedgeredTool(BaseTool):
        """``inner`` with its calls through the effect ledger."""

        def _run(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - invoke below
            raise NotImplementedError("a ledgered tool is called through invoke")

        def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
            return self._through_ledger(input, config, kwargs)

        async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
            # The ledger is synchronous (it writes to the database before and after the
            # call): on a worker thread, which sees this task's context (the step's).
            return await asyncio.to_thread(self._through_ledger, input, config, kwargs)

        #: keeps its own record: a graph step's ToolNode does not put it in the ledger again
        longtask_ledgered: bool = True

        def _through_ledger(self, input: Any, config: Any, kwargs: dict[str, Any]) -> Any:
            ctx = current_context()
            call = _tool_call(input)
            if call is not None:
                args: dict[str, Any] = dict(call.get("args") or {})
                tool_call_id: str | None = str(call["id"])
                digest = canonical_digest(args, f"the arguments of tool {name!r}")
                key: str | None = f"{tool_call_id}|{digest}"
            else:
                args, tool_call_id, key = (
                    (dict(input), None, None)
                    if isinstance(input, dict)
                    else ({"input": input}, None, None)
                )

            def perform(**_args: Any) -> dict[str, Any]:
                if coroutine_only(inner):
                    out = run_coroutine(lambda: inner.ainvoke(input, config, **kwargs))
                else:
                    out = inner.invoke(input, config, **kwargs)
                if isinstance(out, (str, int, float, bool, list, dict, type(None))):
                    return {"content": out, "status": "success"}
                return tool_record(out)  # a ToolMessage, a Command

            record = ctx._effects(  # type: ignore[misc]
                f"tool:{name}",
                perform,
                (),
                args,
                reconcile,
                key,
                tool_call_id=tool_call_id,
                shown={"tool": name, "args": args, "tool_call_id": tool_call_id},
            )
            if call is not None:
                return tool_message_of(record, name, str(call["id"]))
            if isinstance(record, dict) and "content" in record:
                return record["content"]
            # a tool's Command as recorded, or a value a person settled the call with
            return tool_message_of(record, name, "") if is_serialized(record) else record

    return LedgeredTool(
        name=tool.name,
        description=tool.description,
        args_schema=tool.args_schema,
        return_direct=tool.return_direct,
    )


@overload
def ledgered(
    tool: F, *, name: str | None = ..., reconcile: Callable[[EffectCall], Any] | None = ...
) -> F: ...


@overload
def ledgered(
    tool: None = ..., *, name: str | None = ..., reconcile: Callable[[EffectCall], Any] | None = ...
) -> Callable[[F], F]: ...


def ledgered(
    tool: Any = None,
    *,
    name: str | None = None,
    reconcile: Callable[[EffectCall], Any] | None = None,
) -> Any:
    """Put a tool's calls through the effect ledger: a resumed graph never repeats a call
    that completed. ``tool`` is a LangChain tool (``@tool``, ``StructuredTool``) or a plain
    function; use it as a call, ``ledgered(send_email)``, or a decorator. ``name`` names
    the effect (default: the tool's name); ``reconcile(call)`` is asked what happened to a
    call cut off by a crash, told its name, arguments, ``tool_call_id`` and the idempotency
    key it was offered (:class:`longtask.EffectCall`; the call reads that key with
    :func:`longtask.idempotency_key`, or takes it as ``idempotency_key=``): a result, or None
    if nothing happened (it is called again). Without ``reconcile`` the thread pauses for a
    person to settle it (``longtask effects resolve``).

    Results must be JSON values (a tool's ``ToolMessage`` keeps its content and status).
    Works only while a step runs (a graph step's graph, an agent step's tools, a function
    step): elsewhere ``current_context()`` raises.
    """

    def wrap(t: Any) -> Any:
        from langchain_core.tools import BaseTool

        if isinstance(t, BaseTool):
            return _ledgered_tool(t, name or t.name, reconcile)
        if not callable(t):
            raise TypeError(f"ledgered needs a LangChain tool or a function, got {t!r}")
        effect = name or str(getattr(t, "__name__", "effect"))

        def through_ledger(*args: Any, **kwargs: Any) -> Any:
            return current_context().effect(
                f"tool:{effect}", _Plain(t), list(args), kwargs, reconcile=reconcile
            )

        if inspect.iscoroutinefunction(t):

            @functools.wraps(t)
            async def acall(*args: Any, **kwargs: Any) -> Any:
                return await asyncio.to_thread(through_ledger, *args, **kwargs)

            return acall
        return functools.wraps(t)(through_ledger)

    return wrap if tool is None else wrap(tool)


class _Plain:
    """``fn(*args, **kwargs)`` as the one-argument-pair call ``ctx.effect`` makes, so the
    effect's key holds the arguments and ``fn`` never gets ``idempotency_key`` unasked."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn

    @staticmethod
    def call_args(
        args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments ``fn`` was called with (a reconciler's ``EffectCall``)."""
        return tuple(args[0]), dict(args[1])

    def __call__(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if inspect.iscoroutinefunction(self._fn):
            # called on a worker thread (``acall``): back on the process's loop
            return run_coroutine(lambda: self._fn(*args, **kwargs))
        return self._fn(*args, **kwargs)


def coroutine_only(tool: Any) -> bool:
    """A LangChain tool that has only an async body (``@tool async def``)."""
    return getattr(tool, "func", True) is None and getattr(tool, "coroutine", None) is not None
