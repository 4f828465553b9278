"""Graph steps: the user's own LangGraph graph run as one step of a LongTask. Pure pydantic:
the graph is held as an object here and compiled, inspected and run by ``longtask.steps``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, ClassVar, Literal

from longtask.model._notify import Notify
from longtask.model._steps import Retry, Step, _as_retry, _qualname

#: how a graph's tool calls that were cut off mid-way are settled (besides a reconcile
#: function): run again freely, run again with the same idempotency key, or ask a person
TOOL_MARKS = ("read_only", "idempotent", "once")


def tool_mark_problems(where: str, tools: Mapping[str, Any]) -> list[str]:
    """What is wrong with a ``tools=`` mapping (tool name or ``"*"`` → mark), each problem
    naming the fix."""
    out = []
    for name, mark in tools.items():
        if not isinstance(name, str) or not name:
            out.append(f"{where}: tools= keys are tool names (or '*' for every tool), got {name!r}")
        elif mark not in TOOL_MARKS and not callable(mark):
            out.append(
                f"{where}: tools[{name!r}] is {mark!r}; use one of "
                f"{', '.join(map(repr, TOOL_MARKS))} or a function reconcile(call) that looks "
                "the call up in the outside system"
            )
    return out


def _graph_nodes(graph: Any) -> list[str] | None:
    """The node names of a compiled graph or a ``StateGraph`` builder (both have ``nodes``),
    without importing LangGraph; None for a factory (its graph exists only at run time)."""
    nodes = getattr(graph, "nodes", None)
    if isinstance(nodes, Mapping):
        return sorted(str(n) for n in nodes if not str(n).startswith("__"))
    return None


def graph_kind(graph: Any) -> Literal["compiled", "builder", "factory"] | None:
    """What ``graph`` is, told apart by shape: a compiled graph runs (``invoke`` and
    ``get_state``), a builder compiles, a factory is any other callable."""
    if hasattr(graph, "invoke") and hasattr(graph, "get_state"):
        return "compiled"
    if hasattr(graph, "compile") and hasattr(graph, "add_node"):
        return "builder"
    if callable(graph):
        return "factory"
    return None


class GraphStep(Step):
    """A LangGraph graph of the user's own (a compiled graph, a ``StateGraph`` builder, or a
    factory ``fn(config)`` returning either) run as a subgraph of the task's graph: LangGraph
    checkpoints it in the thread at each of its own super-steps, so a crash resumes it after
    its last finished node. Its ``interrupt()`` calls and ``interrupt_before``/``_after``
    stops are pauses of the thread (kind ``interrupt``)."""

    kind: Literal["graph"] = "graph"
    graph: Any
    #: ``input(ctx) -> graph input`` (default: the task's inputs as a dict); typed Any so
    #: that a value that is no callable is reported with the definition's other problems
    input: Any = None
    #: ``output(final_state) -> result`` (default: the final state as JSON)
    output: Any = None
    #: ``context(ctx) -> dict``: the graph's runtime context (LangGraph's ``context=``;
    #: default: the context the thread was started with, or that its latest turn brought)
    context: Any = None
    #: LangGraph's recursion limit for the graph's own super-steps (default: LangGraph's)
    recursion_limit: int | None = None
    #: price per million tokens (input, output) by model name; overrides the built-in table
    prices: dict[str, tuple[float, float]] | None = None
    #: the graph's state is the thread's, kept from one run of the step to the next (a
    #: served LangGraph graph, ``model.graph_app``): its checkpoints are in one namespace,
    #: the step's name, as LangGraph keeps a ``checkpointer=True`` subgraph's, so a new
    #: input is applied to the state the last run left (``Runner.run_again``)
    keeps_state: bool = False
    #: how each tool's cut-off calls are settled (tool name or "*" → a TOOL_MARKS mark or a
    #: reconcile function); every call not "read_only" goes through the effect ledger
    tools: dict[str, Any] | None = None
    #: a graph step may stop at an interrupt of the graph's own; while one is unanswered the
    #: step's result is guarded like a pause's (see ``graphs._checked``)
    may_pause: ClassVar[bool] = True

    def problems(self) -> list[str]:
        out = super().problems()
        if graph_kind(self.graph) is None:
            out.append(
                f"step {self.name!r}: graph must be a LangGraph graph (compiled, a StateGraph "
                f"builder, or a factory taking the run's config), got {type(self.graph).__name__}"
            )
        for what in ("input", "output", "context"):
            fn = getattr(self, what)
            if fn is not None and not callable(fn):
                out.append(f"step {self.name!r}: {what} must be a callable")
        if self.recursion_limit is not None and self.recursion_limit < 1:
            out.append(f"step {self.name!r}: recursion_limit must be at least 1")
        if self.tools is not None:
            if not isinstance(self.tools, Mapping):
                out.append(
                    f"step {self.name!r}: tools= must be a dict of tool name (or '*') to "
                    f"mark, got {type(self.tools).__name__}"
                )
            else:
                out.extend(tool_mark_problems(f"step {self.name!r}", self.tools))
        return out

    def spec(self) -> dict[str, Any]:
        # The graph's node names are what its checkpoints are keyed by: renaming one breaks
        # the resume of a thread inside it, so it changes the definition's hash.
        nodes = _graph_nodes(self.graph)
        return {
            **super().spec(),
            "graph": nodes if nodes is not None else _qualname(self.graph),
            "input": _qualname(self.input) if self.input else None,
            "output": _qualname(self.output) if self.output else None,
            "recursion_limit": self.recursion_limit,
            # only when set: the hash of every other graph step stays as it was
            **({"context": _qualname(self.context)} if self.context else {}),
            # only when set: the hash of every other graph step stays as it was
            **({"keeps_state": True} if self.keeps_state else {}),
        }


def takes_context(steps: Iterable[Step]) -> bool:
    """Whether a task of these steps keeps a run context: it has a graph step, whose graph
    reads it as LangGraph's runtime context."""
    return any(isinstance(s, GraphStep) for s in steps)


def graph_step(
    name: str,
    graph: Any,
    input: Callable[..., Any] | None = None,  # the and LangGraph's word
    output: Callable[..., Any] | None = None,
    *,
    after: Sequence[str] | str = (),
    retry: Retry | int | None = None,
    timeout: float | timedelta | None = None,
    recursion_limit: int | None = None,
    context: Callable[..., Mapping[str, Any]] | None = None,
    prices: Mapping[str, tuple[float, float]] | None = None,
    compensate: Callable[..., Any] | None = None,
    notify: Notify | str | Sequence[str] | None = None,
    tools: Mapping[str, Any] | None = None,
) -> GraphStep:
    """A step that runs ``graph``, any LangGraph graph, as a subgraph of the task.

    ``graph``: a compiled graph, a ``StateGraph`` builder (compiled when the step runs), or
    a factory ``fn(config)`` returning one (as langgraph.json allows). ``input(ctx)`` makes
    the graph's input from the task's inputs and the results of the steps it depends on
    (default: the task's inputs); ``output(state)`` makes the step's result from the
    graph's final state (default: the final state as JSON, messages as dicts).
    ``context(ctx)`` makes the graph's runtime context (what its nodes read as
    ``runtime.context``, and as ``config["configurable"]``); by default it is the context
    the thread was started with (``Runner.start(..., context=...)``, a Server API run's
    ``context``) or that its latest new input brought, else ``{}`` (so a context schema's
    defaults apply, as on LangGraph's server).

    The graph is checkpointed in the thread at each of its super-steps: after a crash it
    continues after its last finished node. Model calls of any LangChain chat model inside
    it are recorded (``model.call``) and charged to the task's budget, which is checked
    before each call. An ``interrupt()`` inside it, or a stop it was compiled with
    (``interrupt_before``/``interrupt_after``), pauses the thread; answer it with
    ``longtask resume THREAD --resume JSON``.

    Every tool call a ``ToolNode`` of the graph makes (``create_agent``'s, a deep agent's and
    its sub-agents') goes through the effect ledger, keyed by the model's ``tool_call_id``:
    a call that completed is never run again. ``tools`` says how a call cut off by a crash
    is settled, per tool name or ``"*"`` for every tool: ``"read_only"`` (not in the ledger,
    run again freely), ``"idempotent"`` (run again with the same ``idempotency_key()``),
    a function ``reconcile(call)`` (asked what happened: the tool's result, or None), or
    ``"once"``, the default (the thread pauses for a person). A tool may carry its own mark
    as ``metadata={"longtask": MARK}``. ``retry`` and ``timeout`` apply to the whole run
    of the graph (a retry continues from the graph's last checkpoint). ``notify``: who is
    told when it pauses (see Notify).
    """
    return GraphStep(
        name=name,
        graph=graph,
        input=input,
        output=output,
        after=after,  # type: ignore[arg-type]  # normalised by the validator
        retry=_as_retry(retry),
        timeout=timeout,  # type: ignore[arg-type]  # normalised by the validator
        recursion_limit=recursion_limit,
        context=context,
        prices=dict(prices) if prices else None,
        compensate=compensate,
        notify=notify,  # type: ignore[arg-type]  # normalised by the validator
        tools=dict(tools) if isinstance(tools, Mapping) else tools,
    )
