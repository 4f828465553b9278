"""An assistant's subgraphs (``GET /assistants/{id}/subgraphs[/{namespace}]``), as
LangGraph's server answers them: ``{namespace: schemas}``.

A task's stages and steps are nodes of its one graph; the subgraphs are its graph steps'
graphs (``graph_step``) and its agent steps' agents (``create_agent``, run as a subgraph of
the step's node), each under its step's name, as LangGraph names a subgraph after its
node; with ``recurse``, a graph step's own subgraphs as ``step|child``. An agent is built
here as the step builds it, over a stand-in model (a read calls no model and needs no
key), without the step's middleware (it adds no state). A graph step given as a factory
``fn(config)`` is made when the step runs: it is not listed (a read runs no user code).
A plain LangGraph graph served as it is (``GraphApp``) lists its own subgraphs.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, create_model

from longtask.model import AgentStep, GraphApp, GraphStep, LongTask, graph_kind

#: how LangGraph joins a namespace's parts
_SEP = "|"


def _agent(step: AgentStep) -> Any:
    """The step's agent as ``run_agent`` builds it, over a model that is never called."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    stand_in = GenericFakeChatModel(messages=iter(()))
    return create_agent(
        stand_in, list(step.tools), response_format=step.response_format, name=step.name
    )


def _compiled(step: GraphStep | AgentStep) -> Any:
    if isinstance(step, AgentStep):
        return _agent(step)
    graph = step.graph
    kind = graph_kind(graph)
    if kind == "compiled":
        return graph
    if kind == "builder":
        return graph.compile()
    return None


def _schema(make: Any) -> Any:
    try:
        return make()
    except Exception:  # a schema the graph cannot give: None, as LangGraph's server answers
        return None


def _describable(kind: Any) -> Any:
    try:
        TypeAdapter(kind).json_schema()
    except Exception:  # a type pydantic cannot describe (a TypeVar...): any value
        return Any
    return kind


def _state_schema(graph: Any) -> Any:
    """The graph's state: a model with a field per channel it streams, typed as the
    channel's updates are."""
    channels = list(getattr(graph, "stream_channels_list", ()) or ())
    fields: dict[str, Any] = {
        c: (_describable(graph.channels[c].UpdateType), None) for c in channels
    }
    return create_model(graph.get_name("State"), **fields).model_json_schema()


def schemas(graph: Any) -> dict[str, Any]:
    """A subgraph's schemas in the shape of LangGraph's ``Subgraphs`` values (no
    configurable fields: ``config_schema`` is {}, as LangGraph's server answers then)."""
    return {
        "input_schema": _schema(graph.get_input_jsonschema),
        "output_schema": _schema(graph.get_output_jsonschema),
        "state_schema": _schema(lambda: _state_schema(graph)),
        "config_schema": {},
        "context_schema": _schema(graph.get_context_jsonschema),
    }


def subgraphs(task: LongTask, namespace: str | None, recurse: bool) -> dict[str, Any]:
    """The task's subgraphs, or the one at ``namespace`` (``step`` or, with ``recurse``,
    ``step|child``); {} when there is none there. A plain graph served as it is has its
    own subgraphs, as LangGraph's server lists them for it (the step that wraps it is not
    one)."""
    if isinstance(task, GraphApp):
        graph = _compiled(task.graph_step)
        if graph is None:
            return {}
        return {
            ns: schemas(g) for ns, g in graph.get_subgraphs(namespace=namespace, recurse=recurse)
        }
    found: dict[str, Any] = {}
    for name, step in task.steps.items():
        if not isinstance(step, GraphStep | AgentStep):
            continue
        if namespace is not None and namespace != name and not namespace.startswith(name + _SEP):
            continue
        graph = _compiled(step)
        if graph is None:
            continue
        if namespace == name:
            return {name: schemas(graph)}
        if namespace is None:
            found[name] = schemas(graph)
        if recurse and isinstance(step, GraphStep):
            child = None if namespace is None else namespace[len(name) + 1 :]
            for sub, g in graph.get_subgraphs(namespace=child, recurse=True):
                found[f"{name}{_SEP}{sub}"] = schemas(g)
    return found
