"""An assistant's subgraphs (``GET /assistants/{id}/subgraphs[/{namespace}]``), as
LangGraph's server answers them: ``{namespace: schemas}``.

A task's stages and steps are nodes of its one graph; the subgraphs are its graph steps'
graphs (``graph_step``), each under its step's name, as LangGraph names a subgraph after
its node; with ``recurse``, their own subgraphs as ``step|child``. A graph step given as a
factory ``fn(config)`` is made when the step runs, and an agent step's agent is built with
its model when the step runs: neither is listed (a read runs no user code).
"""

from __future__ import annotations

from typing import Any

from longtask.model import GraphStep, LongTask, graph_kind

#: how LangGraph joins a namespace's parts
_SEP = "|"


def _compiled(graph: Any) -> Any:
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


def schemas(graph: Any) -> dict[str, Any]:
    """A subgraph's schemas in the shape of LangGraph's ``Subgraphs`` values."""
    channels = list(getattr(graph, "stream_channels_list", ()) or ())
    name = _schema(lambda: graph.get_name("State")) or "State"
    return {
        "input_schema": _schema(graph.get_input_jsonschema),
        "output_schema": _schema(graph.get_output_jsonschema),
        "state_schema": {"title": name, "type": "object", "properties": {c: {} for c in channels}},
        "config_schema": {"type": "object", "properties": {}},
        "context_schema": _schema(graph.get_context_jsonschema),
    }


def subgraphs(task: LongTask, namespace: str | None, recurse: bool) -> dict[str, Any]:
    """The task's subgraphs, or the one at ``namespace`` (``step`` or, with ``recurse``,
    ``step|child``); {} when there is none there."""
    found: dict[str, Any] = {}
    for name, step in task.steps.items():
        if not isinstance(step, GraphStep):
            continue
        if namespace is not None and namespace != name and not namespace.startswith(name + _SEP):
            continue
        graph = _compiled(step.graph)
        if graph is None:
            continue
        if namespace == name:
            return {name: schemas(graph)}
        if namespace is None:
            found[name] = schemas(graph)
        if recurse:
            child = None if namespace is None else namespace[len(name) + 1 :]
            for sub, g in graph.get_subgraphs(namespace=child, recurse=True):
                found[f"{name}{_SEP}{sub}"] = schemas(g)
    return found
