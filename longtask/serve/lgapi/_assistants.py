"""The LangGraph Server API's assistants: search, count, get, graph, schemas and
subgraphs, one assistant per task in the ``Registry`` (``_registry``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from longtask.serve.lgapi._body import integer_field, mapping_field, text_field

if TYPE_CHECKING:
    from longtask.serve._registry import Registered
    from longtask.serve.lgapi._common import Api


def _schemas(entry: Registered) -> dict[str, Any]:
    task = entry.task
    inputs = task.inputs.model_json_schema() if task.inputs is not None else {"type": "object"}
    steps = {name: {"title": name} for name in task.steps}
    state = {"title": task.name, "type": "object", "properties": steps}
    return {
        "graph_id": entry.name,
        "input_schema": inputs,
        "output_schema": state,
        "state_schema": state,
        "config_schema": {"type": "object", "properties": {}},
        "context_schema": None,
    }


def routes(api: Api) -> list[Route]:
    registry = api.registry

    async def search(request: Request) -> Response:
        body = await api.json_body(request)
        graph_id = text_field(body, "graph_id")
        name = (text_field(body, "name") or "").lower()
        metadata = mapping_field(body, "metadata")
        offset = integer_field(body, "offset", 0, 0, 10**9)
        limit = integer_field(body, "limit", 10, 1, 100_000)
        found = [
            a
            for a in (e.to_json() for e in registry.by_name.values())
            if (not graph_id or a["graph_id"] == graph_id)
            and name in a["name"].lower()
            and all(a["metadata"].get(k) == v for k, v in metadata.items())
        ]
        return JSONResponse(found[offset : offset + limit])

    async def count(request: Request) -> Response:
        body = await api.json_body(request)
        graph_id = body.get("graph_id")
        return JSONResponse(sum(1 for e in registry.by_name if not graph_id or e == graph_id))

    async def get(request: Request) -> Response:
        return JSONResponse(api.assistant(request.path_params["assistant_id"]).to_json())

    async def graph(request: Request) -> Response:
        entry = api.assistant(request.path_params["assistant_id"])
        drawn = api.runner.graph(entry.task).get_graph().to_json()
        return JSONResponse(json.loads(json.dumps(drawn, default=str)))

    async def schemas(request: Request) -> Response:
        return JSONResponse(_schemas(api.assistant(request.path_params["assistant_id"])))

    async def subgraphs(request: Request) -> Response:
        api.assistant(request.path_params["assistant_id"])
        return JSONResponse({})

    one = "/assistants/{assistant_id}"
    return [
        Route("/assistants/search", api.reader(search), methods=["POST"]),
        Route("/assistants/count", api.reader(count), methods=["POST"]),
        Route(one, api.reader(get)),
        Route(one + "/graph", api.reader(graph)),
        Route(one + "/schemas", api.reader(schemas)),
        Route(one + "/subgraphs", api.reader(subgraphs)),
    ]
