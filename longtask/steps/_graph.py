"""The node of a graph step: the user's own LangGraph graph run as a subgraph of the task.

The graph is invoked from inside the step's node with the node's config, so LangGraph runs
it on the thread's saver in the node's namespace and checkpoints it at each of its own
super-steps: when the thread is resumed after a crash, the parent resumes its subgraph and
the graph continues after its last finished node.

Around the run:

- model calls of any LangChain chat model inside the graph are seen through a callback
  handler on the run's config (the user's code is not wrapped): the budget and cancel are
  checked before each call, and each call is a ``model.call`` event charged to the budget;
- an interrupt of the graph's own (``interrupt()``, or a stop before or after a node it was
  compiled with) leaves the node as a longtask pause of kind ``interrupt``: its request
  holds the graph's own value under ``value``, and keeps LangGraph's interrupt id, so
  ``Command(resume={id: answer})`` reaches the graph's ``interrupt()`` unchanged;
- the step's retry policy calls the graph again from its last checkpoint, not from its
  input (a run of the node after a crash or a pause resumes it as LangGraph resumes any
  subgraph);
- the graph gets the thread's run context (``lt.context``, or ``step.context(ctx)``) as
  LangGraph's runtime context and in its config's ``configurable``, as LangGraph's server
  gives a run's; a graph with nodes that are async only runs with ``ainvoke``.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.types import Interrupt
from pydantic import BaseModel

from longtask.errors import InvalidInput
from longtask.model import GraphStep, StepInfo, graph_kind
from longtask.steps._attempts import CONTROL, check_limits, with_retries
from longtask.steps._breaks import run_breaks
from longtask.steps._call import NodeCall
from longtask.steps._context import _CURRENT, result_channel
from longtask.steps._function import (
    StepEnv,
    call_step,
    first_attempt,
    step_completed,
    step_failed,
    step_started,
)
from longtask.steps._ledgered import coroutine_only
from longtask.steps._prices import cost_of
from longtask.steps._refused import refused_pause
from longtask.steps._review import review_of
from longtask.steps._toolcalls import inner_work, tool_calls_ledgered
from longtask.store import NO_CHECKPOINT, CheckpointMark
from longtask.store._events import Charge
from longtask.store._kinds import PAUSE_KINDS

try:  # pragma: no cover - the import that works depends on LangGraph's version
    from langgraph._internal._constants import (
        CONFIG_KEY_CHECKPOINT_MAP,
        CONFIG_KEY_RESUME_MAP,
        CONFIG_KEY_RESUMING,
        CONFIG_KEY_SCRATCHPAD,
    )
except ImportError:  # pragma: no cover - LangGraph moved them; their values have not changed
    CONFIG_KEY_SCRATCHPAD = "__pregel_scratchpad"
    CONFIG_KEY_RESUMING = "__pregel_resuming"
    CONFIG_KEY_RESUME_MAP = "__pregel_resume_map"
    CONFIG_KEY_CHECKPOINT_MAP = "checkpoint_map"

#: the kind of pause an interrupt of a graph step's own graph is
INTERRUPT_KIND = "interrupt"

__all__ = ["INTERRUPT_KIND", "graph_node", "kept_ns", "resolve_graph", "to_json"]


def resolve_graph(step: GraphStep, config: RunnableConfig) -> Any:
    """The compiled graph of one run of ``step``: a builder is compiled, a factory called
    (with the run's config if it takes an argument). A graph compiled with a saver of its
    own is run without it: its checkpoints belong in the thread, on longtask's saver."""
    graph = step.graph
    kind = graph_kind(graph)
    if kind == "factory":
        try:
            takes = bool(inspect.signature(graph).parameters)
        except (TypeError, ValueError):
            takes = False
        graph = graph(config) if takes else graph()
        kind = graph_kind(graph)
        if kind == "factory" or kind is None:
            raise InvalidInput(
                f"the factory of graph step {step.name!r} returned a "
                f"{type(graph).__name__}, not a LangGraph graph; return a StateGraph or a "
                "compiled graph"
            )
    if kind == "builder":
        graph = graph.compile()
    if step.keeps_state:
        # LangGraph's own way for a subgraph whose state outlives one call: its checkpoints
        # in one namespace (the step's name, without the task id), on the parent's saver.
        return graph.copy(update={"checkpointer": True})
    if kind == "builder":
        return graph
    saver = getattr(graph, "checkpointer", None)
    if saver is not None and not isinstance(saver, bool):
        return graph.copy(update={"checkpointer": None})
    if saver is False:
        # Compiled without persistence: as a subgraph it would start over after a crash.
        return graph.copy(update={"checkpointer": None})
    return graph


def to_json(value: Any, what: str) -> Any:
    """A graph's state as JSON: messages as LangChain's message dicts, pydantic models and
    dataclasses dumped; anything else without a JSON form is refused, naming ``output=``."""
    from langchain_core.messages import BaseMessage, message_to_dict

    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, BaseMessage):
        return message_to_dict(value)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): to_json(v, what) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v, what) for v in value]
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(dataclasses.asdict(value), what)
    raise InvalidInput(
        f"{what} holds a {type(value).__name__}, which has no JSON form; give the graph step "
        "output=lambda state: ... to make the step's result from the final state"
    )


class ModelCalls(BaseCallbackHandler):
    """LangChain callbacks on every model call of the graph: check the budget before it,
    record and charge it after; and count the tools the graph runs (a ``ToolNode``'s, a
    sub-agent's), charged with the next event written anyway (the next ``model.call``,
    else the step's ``step.completed``): no write per tool call."""

    #: a budget pause or cancel raised here must stop the call, not be logged and ignored
    raise_error = True
    #: called in the model call's own thread, where LangGraph's config (for interrupt())
    #: and the step's context are
    run_inline = True

    def __init__(self, env: StepEnv, call: NodeCall, info: StepInfo, step: GraphStep) -> None:
        self.env, self.call, self.info, self.step = env, call, info, step
        self._started: dict[UUID, tuple[float, str | None, str | None, str | None]] = {}
        self._lock = threading.Lock()
        self.calls = 0
        self.tokens = 0
        #: tools the graph ran in this run of the step, and how many are not charged yet
        self.tool_calls = 0
        self._uncharged = 0

    def _start(self, run_id: UUID, metadata: Mapping[str, Any] | None) -> None:
        check_limits(self.env, self.call, self.info)
        meta = metadata or {}
        ns = meta.get("langgraph_checkpoint_ns")
        # a sub-agent's model call inside a tool call: that call may run again (see
        # steps._toolcalls)
        inner_work(ns)
        with self._lock:
            self._started[run_id] = (
                time.monotonic(),
                meta.get("ls_model_name"),
                meta.get("langgraph_node"),
                # where in the graph the call was made, task ids stripped: a sub-agent's
                # calls (``research|tools|model``) told from its parent's (``research|model``)
                kept_ns(ns) if ns else None,
            )

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self.tool_calls += 1
            self._uncharged += 1

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        # A tool that paused (its interrupt(), a gate) did not run to an end: it runs again
        # once answered, and is counted then.
        if not isinstance(error, GraphBubbleUp):
            self.on_tool_end(None, run_id=run_id)

    def take_tool_calls(self) -> int:
        """The tool calls not charged yet, now charged by the caller."""
        with self._lock:
            taken, self._uncharged = self._uncharged, 0
            return taken

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # a node of a graph run inside a tool call (a sub-agent's first node, before any
        # model call of it): that call may run again (see steps._toolcalls)
        inner_work((metadata or {}).get("langgraph_checkpoint_ns"))

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(run_id, metadata)

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(run_id, metadata)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._started.pop(run_id, None)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            started, requested, node, ns = self._started.pop(
                run_id, (time.monotonic(), None, None, None)
            )
            self.calls += 1
            number = self.calls
            # the tools run since the last call: charged with this one
            tools, self._uncharged = self._uncharged, 0
        latency = time.monotonic() - started
        generation = next(iter(next(iter(response.generations or []), None) or []), None)
        message = getattr(generation, "message", None)
        usage = dict(getattr(message, "usage_metadata", None) or {})
        meta = dict(getattr(message, "response_metadata", None) or {})
        if not usage:
            # A plain LLM (no message): the provider's token counts, where it gives them.
            raw = (response.llm_output or {}).get("token_usage") or {}
            usage = {
                "input_tokens": raw.get("prompt_tokens", 0),
                "output_tokens": raw.get("completion_tokens", 0),
            }
        reported = meta.get("model_name") or meta.get("model")
        tokens_in = int(usage.get("input_tokens", 0) or 0)
        tokens_out = int(usage.get("output_tokens", 0) or 0)
        total = int(usage.get("total_tokens", tokens_in + tokens_out) or 0)
        model = reported or requested or "unknown"
        cost = cost_of(model, tokens_in, tokens_out, self.step.prices)
        with self._lock:
            self.tokens += total
        self.env.emit(
            self.call,
            "model.call",
            self.call.key("model.call", run_id),
            self.info,
            data={
                "call": number,
                "node": node,
                "namespace": ns,
                "model_requested": requested,
                "model": reported,
                "usage": {"input": tokens_in, "output": tokens_out, "total": total},
                "cost": cost,
                "latency": round(latency, 4),
                "finish_reason": meta.get("finish_reason"),
                "response_id": meta.get("id") or getattr(message, "id", None),
                "tool_calls": len(getattr(message, "tool_calls", None) or []),
            },
            # Paid by the write that stores the event (see Charge): no transaction of its own.
            charge=self.env.charge_for(
                self.call, self.info, total, cost or 0.0, model_calls=1, tool_calls=tools
            ),
        )


def _tools_charge(
    env: StepEnv, call: NodeCall, info: StepInfo, handler: ModelCalls
) -> Charge | None:
    """The charge of the tool calls not charged yet, for the step's ``step.completed``
    (None if there are none: a charge of nothing would still write its rows)."""
    taken = handler.take_tool_calls()
    return env.charge_for(call, info, 0, 0.0, tool_calls=taken) if taken else None


def _charge_tools(env: StepEnv, call: NodeCall, info: StepInfo, handler: ModelCalls) -> None:
    """Charge the tool calls of a run that ends with no event of its own (a pause, an
    error) after its last model call: a write of their own, only then."""
    taken = handler.take_tool_calls()
    if taken:
        env.store.charge(
            call.thread_id,
            step=info.name,
            ancestors=env.ancestors_of(call.thread_id),
            tool_calls=taken,
        )


def _with_handler(config: RunnableConfig, handler: BaseCallbackHandler) -> RunnableConfig:
    """``config`` with ``handler`` added to its callbacks, inherited by every run inside."""
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        manager = callbacks.copy()
        manager.add_handler(handler, inherit=True)
        return {**config, "callbacks": manager}
    return {**config, "callbacks": [*(callbacks or []), handler]}


#: configurable keys a run sets itself: a run context key of the same name is not put there
_RUN_SET = frozenset({"thread_id", "checkpoint_id", "checkpoint_ns", "checkpoint_map"})


def _run_context(step: GraphStep, ctx: Any) -> dict[str, Any]:
    """The run context the step's graph gets: ``step.context(ctx)``, else the thread's."""
    if step.context is None:
        return dict(ctx.run_context)
    made = step.context(ctx)
    if not isinstance(made, Mapping):
        raise InvalidInput(
            f"context= of graph step {step.name!r} returned a {type(made).__name__}; return "
            "a dict (the graph's runtime context)"
        )
    return dict(made)


def _with_context(config: RunnableConfig, context: Mapping[str, Any]) -> RunnableConfig:
    """``config`` with the run context's keys in its ``configurable``, as LangGraph's server
    mirrors a run's context there (for graphs and factories that read their settings from
    the config); a key the config has, or a run sets itself, is left as it is."""
    conf = dict(config.get("configurable") or {})
    added = {
        k: v
        for k, v in context.items()
        if k not in conf and k not in _RUN_SET and not k.startswith("__")
    }
    return {**config, "configurable": {**conf, **added}} if added else config


def _context_for(graph: Any, context: dict[str, Any]) -> dict[str, Any]:
    """The run context as ``graph`` takes it: only its context schema's keys when it has a
    schema with properties (LangGraph's server drops the others; a dataclass or a model
    would refuse them), else all of it."""
    try:
        schema = graph.get_context_jsonschema()
    except Exception:  # a schema LangGraph cannot describe: given as it is
        return context
    props = (schema or {}).get("properties") if isinstance(schema, Mapping) else None
    if not props:
        return context
    return {k: v for k, v in context.items() if k in props}


def _async_only(graph: Any, seen: frozenset[int] = frozenset()) -> bool:
    """Whether some node of ``graph`` runs only on LangGraph's async API: an ``async def``
    node, a ToolNode with a tool that is a coroutine only (``@tool async def``), or such a
    node in a subgraph it holds (as LangChain's templates write their agents)."""
    for node in (getattr(graph, "nodes", None) or {}).values():
        bound = getattr(node, "bound", None)
        if bound is None or id(bound) in seen:
            continue
        if getattr(bound, "func", True) is None and getattr(bound, "afunc", None) is not None:
            return True
        tools = getattr(bound, "tools_by_name", None)
        if isinstance(tools, Mapping) and any(coroutine_only(t) for t in tools.values()):
            return True
        if hasattr(bound, "nodes") and _async_only(bound, seen | {id(graph)}):
            return True
    return False


def _invoker(graph: Any, context: dict[str, Any]) -> Callable[..., Any]:
    """How the step calls ``graph``: ``invoke``, or ``ainvoke`` (on the process's loop for
    async step code, by ``call_step``) for a graph with nodes that are async only; with the
    stops the run asks for (``run_breaks``)."""
    breaks = run_breaks()
    if not _async_only(graph):
        return functools.partial(graph.invoke, context=context, **breaks)

    async def ainvoke(given: Any, config: RunnableConfig) -> Any:
        return await graph.ainvoke(given, config, context=context, **breaks)

    return ainvoke


def _stop_id(graph: Any, config: RunnableConfig, call: NodeCall) -> tuple[str, list[str]]:
    """An id for a stop before or after a node (which LangGraph raises without an
    ``Interrupt``), stable while the stop is pending: the graph's checkpoint at the stop
    makes it, so the next stop (at a later checkpoint) has another. 32 hex digits, as
    LangGraph's ids, so an answer by id is a resume map to it."""
    try:
        state = graph.get_state(config)
        checkpoint = (state.config.get("configurable") or {}).get("checkpoint_id")
        nodes = list(state.next)
    except Exception:  # the id must not fail the pause; the run's is enough
        checkpoint, nodes = None, []
    seed = f"{call.thread_id}|{call.task_id}|{checkpoint}"
    return hashlib.md5(seed.encode(), usedforsecurity=False).hexdigest(), nodes


def _stop(info: StepInfo, call: NodeCall, interrupt_id: str, nodes: list[str]) -> Interrupt:
    request = {
        "kind": INTERRUPT_KIND,
        "step": info.name,
        "value": None,
        "stop": True,
        "next": nodes,
        "reason": f"graph step {info.name!r} stopped before {', '.join(nodes) or 'its end'}",
        "command": f"`longtask resume {call.thread_id} --interrupt {interrupt_id} --resume '{{}}'`",
        "answer": "any JSON value (the graph's own stop takes none): the graph goes on",
    }
    return Interrupt(value=request, id=interrupt_id)


def _unanswered_stop(graph: Any, config: RunnableConfig, call: NodeCall, info: StepInfo) -> Any:
    """The stop (before or after a node) the graph is at, if this run answers other
    interrupts by id but not this one.

    LangGraph resumes a graph past its stop whenever the graph is resumed at all, and a
    resume of the thread re-runs every interrupted node: answering another pause of the
    thread would let this graph go on unanswered. Only where the answers are given by id (a
    resume map, as longtask's own answers are) is it known which pauses are answered."""
    answers = (config.get("configurable") or {}).get(CONFIG_KEY_RESUME_MAP)
    if not answers or not (
        getattr(graph, "interrupt_before_nodes", None)
        or getattr(graph, "interrupt_after_nodes", None)
        or run_breaks()
    ):
        return None
    try:
        state = graph.get_state(config)
    except Exception:  # no state to read: no stop to keep
        return None
    if not state.next or any(t.interrupts or t.error for t in state.tasks):
        return None
    interrupt_id, nodes = _stop_id(graph, config, call)
    if interrupt_id in answers:
        return None
    return _stop(info, call, interrupt_id, nodes)


def _short(value: Any) -> str:
    """The graph's interrupt value as one short line, for status and watch."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 120 else text[:119] + "…"


def _as_pause(
    exc: GraphInterrupt,
    env: StepEnv,
    call: NodeCall,
    info: StepInfo,
    graph: Any,
    config: RunnableConfig,
    refused: Mapping[str, str] | None = None,
) -> GraphInterrupt:
    """The interrupt ``exc`` of the graph as longtask pauses (a gate of longtask's own, such
    as a budget reached before a model call, is one already). ``refused``: the error the
    graph raised on the last answer to an interrupt, by id (``steps._refused``)."""
    found = list(exc.args[0]) if exc.args and exc.args[0] else []
    out: list[Interrupt] = []
    if not found:
        out.append(_stop(info, call, *_stop_id(graph, config, call)))
    for intr in found:
        value = intr.value
        if isinstance(value, dict) and value.get("kind") in PAUSE_KINDS:
            out.append(intr)
            continue
        schema = getattr(intr, "response_schema", None)
        request = {
            "kind": INTERRUPT_KIND,
            "step": info.name,
            "value": value,
            "reason": f"graph step {info.name!r} asks {_short(value)}",
            "command": f"`longtask resume {call.thread_id} --interrupt {intr.id} --resume JSON`",
            "answer": "the value the graph's interrupt() returns, as JSON",
        }
        if isinstance(schema, dict):
            # the answer's JSON schema, as the graph gave it: answers are checked against it
            request["response_schema"] = schema
        review = review_of(value, schema)
        if review is not None:
            # LangChain's HumanInTheLoopMiddleware asks: each tool call, and what it takes
            names = ", ".join(a.name for a in review.actions)
            request["reason"] = f"graph step {info.name!r} asks to review tool calls: {names}"
            request["actions"] = [a.view() for a in review.actions]
            request["answer"] = review.shape()
            request["command"] = (
                f"`longtask approve {call.thread_id} {intr.id} --by NAME` (or reject)"
            )
        if refused and intr.id in refused:
            # asked again: the graph raised on the last answer (recorded: interrupt.refused)
            request["refused"] = refused[intr.id]
            request["reason"] += f" (the last answer failed: {refused[intr.id]})"
        # the graph's response schema kept on the pause, as LangGraph's server shows it
        out.append(Interrupt(value=request, id=intr.id, response_schema=schema))
    for intr in out:
        request = intr.value
        if request.get("kind") == INTERRUPT_KIND:
            key = f"interrupt.required/{info.name}/{intr.id}"
            if env.first_time(call.thread_id, key):
                env.emit(
                    call,
                    "interrupt.required",
                    key,
                    info,
                    data={"interrupt_id": intr.id, **request},
                )
    return GraphInterrupt(tuple(out))


def kept_ns(ns: Any) -> str:
    """The namespace a graph step that keeps its state (``keeps_state``) has its graph's
    checkpoints in: the node's, without task ids (as LangGraph keeps a ``checkpointer=True``
    subgraph's)."""
    return "|".join(part.split(":")[0] for part in str(ns or "").split("|"))


def _turn_config(env: StepEnv, ns: str, config: RunnableConfig) -> RunnableConfig:
    """``config`` saying where this run of a state-keeping graph step starts the graph: it
    continues the graph's run in progress, or starts a new one on the state the graph had
    at this checkpoint of the task.

    Its checkpoints are in one namespace for every run of the step and every branch of the
    thread, so the latest of them says neither: each notes the task's checkpoint it was
    made under (LangGraph's ``parents``), and the graph stands on the latest made under a
    checkpoint whose run of the graph this one has (``_runs_in``). Made under this very
    checkpoint (a crash, a pause or a retry: the step's node runs again at the super-step
    it ran at), the graph continues it; made earlier (a new input, a fork), a new run of
    the graph starts on it and applies the input to its state through the graph's
    reducers. So a fork of the thread at an earlier checkpoint has the graph's state as
    it was there, not a later turn's."""
    conf = dict(config.get("configurable") or {})
    here = (conf.get(CONFIG_KEY_CHECKPOINT_MAP) or {}).get("")
    thread_id = str(conf.get("thread_id"))
    made = env.store.checkpoint_marks(thread_id, ns) if here is not None else []
    stands_on = None
    if made and here is not None:
        runs, marked = _runs_in(env.store.checkpoint_marks(thread_id), here)
        stands_on = next((m for m in reversed(made) if m.made_under in runs), None)
        if stands_on is None and marked is not None:
            # a new input given at one of the graph's own past checkpoints
            stands_on = next((m for m in made if m.checkpoint_id == marked), None)
    conf[CONFIG_KEY_RESUMING] = stands_on is not None and stands_on.made_under == here
    if stands_on is None and made:
        # no run of the graph in this line yet (a fork before its first): it starts empty
        conf["checkpoint_id"] = NO_CHECKPOINT
    elif stands_on is not None and stands_on.checkpoint_id != made[-1].checkpoint_id:
        # not the namespace's latest (that is another branch's): the graph reads this one
        conf["checkpoint_id"] = stands_on.checkpoint_id
    return {**config, "configurable": conf}


def _runs_in(marks: list[CheckpointMark], here: str) -> tuple[set[str], str | None]:
    """The task's checkpoints whose run of the graph step the state at ``here`` has: ``here``
    (a run in progress), and each earlier one on its line whose run went on into the line:
    its next checkpoint there is the one its run made (``loop``), or its run never made one
    (it stopped at the graph's interrupt and the line went on from there, as a new input
    does). A branch made beside a run that finished (a fork at the checkpoint it started
    at) has none of it. The line is followed back to a checkpoint that names the graph's
    checkpoint it stands on (``STANDS_ON``: a new input at a past one), returned too."""
    by_id = {m.checkpoint_id: m for m in marks}
    finished = {m.parent_id for m in marks if m.source == "loop"}
    out = {here}
    node = by_id.get(here)
    while node is not None and node.stands_on is None:
        if node.parent_id is None or node.parent_id in out:
            break
        if node.source == "loop" or node.parent_id not in finished:
            out.add(node.parent_id)
        node = by_id.get(node.parent_id)
    return out, node.stands_on if node is not None else None


def _keep_transcript(env: StepEnv, call: NodeCall, info: StepInfo, final: Any) -> None:
    """A graph whose state has LangChain ``messages`` (an agent's) keeps them, as an agent
    step does: the artifact ``<step>.transcript.json`` (``runner.transcript``)."""
    from langchain_core.messages import BaseMessage, messages_to_dict

    messages = final.get("messages") if isinstance(final, Mapping) else None
    if not isinstance(messages, list) or not all(isinstance(m, BaseMessage) for m in messages):
        return
    data = json.dumps(messages_to_dict(messages), default=str).encode()
    env.artifact(call, info, f"{info.name}.transcript.json", data, "application/json")


def graph_node(
    step: GraphStep, info: StepInfo, env: StepEnv
) -> Callable[[dict[str, Any], RunnableConfig], dict[str, Any]]:
    channel = result_channel(step.name)
    what = f"the result of graph step {step.name!r}"
    # A builder is compiled once per compiled task; a factory is called on every run of
    # the node (it may build from the run's config).
    made: list[Any] = []

    def graph_of(config: RunnableConfig) -> Any:
        if graph_kind(step.graph) == "factory":
            return resolve_graph(step, config)
        if not made:
            made.append(resolve_graph(step, config))
        return made[0]

    def node(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        call = NodeCall.from_config(config)
        # where LangGraph keeps the graph's own checkpoints (`longtask history --inner`)
        ns = (config.get("metadata") or {}).get("langgraph_checkpoint_ns")
        if step.keeps_state:
            ns = kept_ns(ns)
        step_started(env, call, info, first_attempt(env, call, info), {"checkpoint_ns": ns})
        started = time.monotonic()
        ctx = env.context(call, info, state)
        # The graph's nodes and tools may read current_context() (ledgered tools do).
        token = _CURRENT.set(ctx)
        handler = ModelCalls(env, call, info, step)
        try:
            run_context = _run_context(step, ctx)
            config = _with_context(config, run_context)
            graph = graph_of(config)
            # LangGraph's runtime context: a dict even when empty, so the graph's context
            # schema is built with its defaults, as on LangGraph's server
            invoke = _invoker(graph, _context_for(graph, run_context))
            sub = _with_handler(config, handler)
            if step.recursion_limit is not None:
                sub = {**sub, "recursion_limit": step.recursion_limit}

            if step.keeps_state:
                sub = _turn_config(env, str(ns), sub)
            stop = _unanswered_stop(graph, sub, call, info)
            if stop is not None:
                raise _as_pause(GraphInterrupt((stop,)), env, call, info, graph, sub)

            #: whether this run of the node called the graph yet (a retry's call continues)
            called: list[bool] = []

            def attempt_fn(attempt: int) -> Any:
                if not called:
                    if step.input is not None:
                        given = step.input(ctx)
                    else:
                        inputs = ctx.inputs
                        given = (
                            inputs.model_dump(mode="json")
                            if isinstance(inputs, BaseModel)
                            else inputs
                        )
                    args: tuple[Any, ...] = (given, sub)
                else:
                    # A retry continues from the graph's last checkpoint: its input would
                    # start it over on top of its state. Without the task's scratchpad,
                    # whose count of subgraph calls would put a second call of the graph
                    # in this task in a namespace of its own (an empty one).
                    conf = {
                        **(sub.get("configurable") or {}),
                        CONFIG_KEY_RESUMING: True,
                        CONFIG_KEY_SCRATCHPAD: None,
                    }
                    # the graph's latest checkpoint is this run's now (`_turn_config`)
                    conf.pop("checkpoint_id", None)
                    args = (None, {**sub, "configurable": conf})
                called.append(True)
                try:
                    final = call_step(invoke, args, step.timeout, f"graph step {step.name!r}")
                except GraphInterrupt as exc:
                    raise _as_pause(exc, env, call, info, graph, args[1]) from None
                except Exception as exc:
                    # raised on an answer: the same pause again, the answer taken back
                    pause = refused_pause(exc, env, call, info, graph, args[1], str(ns), _as_pause)
                    if pause is None:
                        raise
                    raise pause from None
                result = step.output(final) if step.output is not None else to_json(final, what)
                _keep_transcript(env, call, info, final)
                return env.codec.encode(result, what)

            with tool_calls_ledgered(step.tools, env.store.effect_forget):
                encoded, attempt = with_retries(env, call, info, step.retry, attempt_fn)
        except (GraphBubbleUp, *CONTROL):
            _charge_tools(env, call, info, handler)
            raise
        except Exception as exc:
            _charge_tools(env, call, info, handler)
            step_failed(env, call, info, exc)
            raise
        finally:
            _CURRENT.reset(token)
        step_completed(
            env,
            call,
            info,
            attempt,
            {
                "duration": round(time.monotonic() - started, 6),
                "model_calls": handler.calls,
                "tool_calls": handler.tool_calls,
            },
            charge=_tools_charge(env, call, info, handler),
        )
        return {channel: encoded}

    node.__name__ = step.name
    return node
