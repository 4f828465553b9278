"""The LangGraph Server API's assistants: the registered tasks' own (one per task in the
``Registry``, as LangGraph's server makes one per graph; they cannot be changed or
deleted) and assistants created through the API, versioned configurations of a task
stored in the database (``store._assistants``): create, update (a new version), delete,
versions, set latest, search, count, get, graph, schemas and subgraphs.

Who may do what: reads need what any read needs, writes a token and not a viewer; an
update, set latest or delete needs the assistant's creator or an admin. With LangGraph's
auth handlers (langgraph.json ``auth``) the ``assistants`` handler decides instead, asked
with the values LangGraph's server gives it; a filter it returns is matched against the
assistant's metadata (404 when it does not match), and metadata it sets on a create is
stored.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from longtask.serve.access import about, caller_of, matches
from longtask.serve.lgapi._body import integer_field, mapping_field, strings_field, text_field
from longtask.serve.lgapi._subgraphs import subgraphs as subgraphs_of
from longtask.serve.lgapi.resources._assistant_body import (
    FIELDS,
    SORTS,
    check_body,
    row_json,
    synced,
)
from longtask.store._assistants import AssistantRow

if TYPE_CHECKING:
    from longtask.serve._registry import Registered
    from longtask.serve.lgapi._common import Api


log = logging.getLogger("longtask.serve")


def _schemas(entry: Registered) -> dict[str, Any]:
    graph = entry.graph
    if graph is not None:
        return {"graph_id": entry.name, **graph_schemas(graph)}
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


def graph_schemas(graph: Any) -> dict[str, Any]:
    """A served graph's own schemas, as LangGraph's server describes a graph: its input and
    output, its state (each channel it streams, typed by what an update of it takes), its
    ``configurable`` and its runtime context. A schema that cannot be made is None, as
    there."""
    from pydantic import create_model

    def made(fn: Any) -> Any:
        try:
            return fn()
        except Exception as exc:
            log.warning("graph %s: a schema could not be made: %s", graph.name, exc)
            return None

    def state() -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for name in graph.stream_channels_list:
            kind = getattr(graph.channels[name], "UpdateType", Any)
            try:
                create_model(name, value=(kind, None)).model_json_schema()
            except Exception:
                kind = Any
            fields[name] = (kind, None)
        schema: dict[str, Any] = create_model(graph.get_name("State"), **fields).model_json_schema()
        return schema

    def configurable() -> dict[str, Any]:
        with warnings.catch_warnings():
            # deprecated for the context; still what a graph's `configurable` is
            warnings.simplefilter("ignore")
            schema = graph.get_config_jsonschema()
        inner = (schema.get("properties") or {}).get("configurable")
        if isinstance(inner, dict) and "$ref" in inner:
            name = inner["$ref"].rsplit("/", 1)[-1]
            inner = (schema.get("$defs") or {}).get(name)
        return inner if isinstance(inner, dict) else {}

    return {
        "input_schema": made(graph.get_input_jsonschema),
        "output_schema": made(graph.get_output_jsonschema),
        "state_schema": made(state),
        "config_schema": made(configurable),
        "context_schema": made(graph.get_context_jsonschema),
    }


def _contains(have: Any, want: Any) -> bool:
    """PostgreSQL's ``@>`` on metadata, as LangGraph's server filters with it."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(
            k in have and _contains(have[k], v) for k, v in want.items()
        )
    return bool(have == want)


def _system(entry: Registered) -> HTTPException:
    return HTTPException(
        409,
        f"assistant {entry.assistant_id!r} is task {entry.name!r} as serve was given it: it "
        "cannot be changed or deleted. To configure it, create an assistant of it: POST "
        f'/assistants with {{"graph_id": "{entry.name}"}} and its config or context',
    )


def routes(api: Api) -> list[Route]:
    registry = api.registry
    store = api.runner.db.store

    def every() -> list[dict[str, Any]]:
        """Every assistant this server serves: the registered tasks' and the created ones
        of a task it serves (another server's tasks' are not shown, as on LangGraph's)."""
        made = store.assistants(sorted(registry.by_name))
        return [e.to_json() for e in registry.by_name.values()] + [row_json(a) for a in made]

    async def ask(request: Request, action: str, value: dict[str, Any]) -> dict[str, Any] | None:
        return await api.access.ask(request, "assistants", action, value)

    def check_graph(graph_id: str | None) -> None:
        if graph_id is not None and registry.find(graph_id) is None:
            raise HTTPException(
                404,
                f"Graph {graph_id!r} not found. Expected one of: {sorted(registry.by_name)} "
                "(the tasks serve was given: --task REF or longtask.json)",
            )

    async def found_one(
        request: Request, assistant_id: str, filters: dict[str, Any] | None
    ) -> tuple[Registered, AssistantRow | None, dict[str, Any]]:
        entry, row = await api.call(api.resolve, assistant_id)
        shown = row_json(row) if row is not None else entry.to_json()
        if not matches(shown["metadata"], filters):
            raise HTTPException(404, f"no assistant {assistant_id!r}")
        return entry, row, shown

    def may_change(request: Request, row: AssistantRow, decided: bool) -> None:
        """Without auth handlers: the creator or an admin (a handler decided otherwise)."""
        caller = caller_of(request)
        if decided or api.access.handlers is not None:
            return
        if caller.role == "admin" or (caller.name is not None and caller.name == row.owner):
            return
        raise HTTPException(
            403,
            f"{caller.name!r} may not change assistant {row.assistant_id!r}: only who "
            f"created it ({row.owner!r}) or an admin may",
        )

    # -- reads -------------------------------------------------------------------------------

    def selected(body: dict[str, Any]) -> list[str] | None:
        select = strings_field(body, "select")
        if select:
            wrong = [s for s in select if s not in FIELDS]
            if wrong:
                raise HTTPException(
                    422, f"Invalid select columns: {wrong}. Expected: {', '.join(FIELDS)}"
                )
        return select or None

    def filtered(
        body: dict[str, Any], filters: dict[str, Any] | None, graph_id: str | None
    ) -> list[dict[str, Any]]:
        name = (text_field(body, "name") or "").lower()
        metadata = mapping_field(body, "metadata")
        return [
            a
            for a in every()
            if (not graph_id or a["graph_id"] == graph_id)
            and name in a["name"].lower()
            and _contains(a["metadata"], metadata)
            and matches(a["metadata"], filters)
        ]

    async def search(request: Request) -> Response:
        body = await api.json_body(request)
        graph_id = text_field(body, "graph_id")
        metadata = mapping_field(body, "metadata")
        offset = integer_field(body, "offset", 0, 0, 10**9)
        limit = integer_field(body, "limit", 10, 1, 1000)
        sort_by = text_field(body, "sort_by")
        order = (text_field(body, "sort_order") or "desc").lower()
        if sort_by is not None and sort_by not in SORTS:
            raise HTTPException(422, f"sort_by must be one of {', '.join(SORTS)}, not {sort_by!r}")
        if order not in ("asc", "desc"):
            raise HTTPException(422, f"sort_order must be asc or desc, not {order!r}")
        select = selected(body)
        value = {"graph_id": graph_id, "metadata": metadata, "limit": limit, "offset": offset}
        filters = await ask(request, "search", value)
        check_graph(graph_id)
        found = await api.call(filtered, body, filters, graph_id)
        key = sort_by or "created_at"
        text_key = key in ("name", "graph_id")
        found.sort(
            key=lambda a: str(a.get(key) or "").lower() if text_key else str(a.get(key)),
            reverse=sort_by is None or order == "desc",
        )
        page = found[offset : offset + limit]
        if select:
            page = [{k: v for k, v in a.items() if k in select} for a in page]
        headers = {"X-Pagination-Total": str(len(page) + offset)}
        if len(found) > offset + limit:
            headers = {
                "X-Pagination-Total": str(offset + limit + 1),
                "X-Pagination-Next": str(offset + limit),
            }
        return JSONResponse(page, headers=headers)

    async def count(request: Request) -> Response:
        body = await api.json_body(request)
        graph_id = text_field(body, "graph_id")
        metadata = mapping_field(body, "metadata")
        value = {"graph_id": graph_id, "metadata": metadata, "limit": 0, "offset": 0}
        filters = await ask(request, "search", value)
        check_graph(graph_id)
        return JSONResponse(len(await api.call(filtered, body, filters, graph_id)))

    async def read(request: Request) -> tuple[Registered, AssistantRow | None, dict[str, Any]]:
        assistant_id = request.path_params["assistant_id"]
        filters = await ask(request, "read", {"assistant_id": assistant_id})
        return await found_one(request, assistant_id, filters)

    async def get(request: Request) -> Response:
        return JSONResponse((await read(request))[2])

    async def graph(request: Request) -> Response:
        entry = (await read(request))[0]
        drawn = api.runner.graph(entry.task).get_graph().to_json()
        return JSONResponse(json.loads(json.dumps(drawn, default=str)))

    async def schemas(request: Request) -> Response:
        return JSONResponse(_schemas((await read(request))[0]))

    async def subgraphs(request: Request) -> Response:
        entry = (await read(request))[0]
        namespace = request.path_params.get("namespace")
        recurse = request.query_params.get("recurse", "False") in ("true", "True")
        found = await api.call(subgraphs_of, entry.task, namespace, recurse)
        return JSONResponse(json.loads(json.dumps(found, default=str)))

    async def versions(request: Request) -> Response:
        assistant_id = request.path_params["assistant_id"]
        body = await api.json_body(request)
        metadata = mapping_field(body, "metadata")
        limit = integer_field(body, "limit", 10, 1, 1000)
        offset = integer_field(body, "offset", 0, 0, 10**9)
        filters = await ask(request, "read", {"assistant_id": assistant_id})
        _, row, shown = await found_one(request, assistant_id, None)
        if row is None:
            made = [{k: v for k, v in shown.items() if k != "updated_at"}]
        else:
            rows = await api.call(store.assistant_versions, row.assistant_id)
            made = [row_json(v, version_row=True) for v in rows]
        found = [
            v
            for v in made
            if _contains(v["metadata"], metadata) and matches(v["metadata"], filters)
        ]
        if not found:
            raise HTTPException(404, f"Assistant {assistant_id} not found")
        return JSONResponse(found[offset : offset + limit])

    # -- writes ------------------------------------------------------------------------------

    async def create(request: Request, actor: str) -> Response:
        body = await api.json_body(request)
        fields = check_body(body, create=True)
        metadata = dict(fields["metadata"] or {})
        value = {
            "assistant_id": fields["assistant_id"],
            "graph_id": fields["graph_id"],
            "config": fields["config"],
            "context": fields["context"],
            "metadata": metadata,
            "name": fields["name"] or "Untitled",
        }
        check_graph(fields["graph_id"])
        filters = await ask(request, "create", value)
        config, context = synced(fields["config"], fields["context"])
        if registry.find(fields["assistant_id"]) is not None:
            raise HTTPException(409, f"Assistant {fields['assistant_id']} already exists")
        stored = value.get("metadata")
        row = AssistantRow(
            assistant_id=fields["assistant_id"],
            graph_id=str(fields["graph_id"]),
            version=1,
            name=fields["name"] or "Untitled",
            description=fields["description"],
            config=config,
            context=context or {},
            # What the handler set (an owner) is stored with it.
            metadata=dict(stored) if isinstance(stored, dict) else metadata,
            owner=actor,
            created_at=0.0,
            updated_at=0.0,
        )
        made = await api.call(store.assistant_create, row)
        if made is None:
            existing = await api.call(store.assistant_get, row.assistant_id)
            if (
                existing is None
                or fields["if_exists"] == "raise"
                or not matches(existing.metadata, filters)
            ):
                raise HTTPException(
                    409,
                    f"Assistant {row.assistant_id} already exists (send if_exists="
                    '"do_nothing" to get it instead, or another assistant_id)',
                )
            made = existing
        return JSONResponse(row_json(made))

    async def changeable(
        request: Request, value: dict[str, Any]
    ) -> tuple[AssistantRow, dict[str, Any] | None]:
        assistant_id = request.path_params["assistant_id"]
        action = "delete" if request.method == "DELETE" else "update"
        filters = await ask(request, action, value)
        entry, row, _ = await found_one(request, assistant_id, None)
        if row is None:
            raise _system(entry)
        if not matches(row.metadata, filters):
            raise HTTPException(404, f"Assistant {assistant_id} not found")
        may_change(request, row, filters is not None)
        return row, filters

    async def patch(request: Request, actor: str) -> Response:
        body = await api.json_body(request)
        fields = check_body(body, create=False)
        metadata = fields["metadata"] or {}
        value = {
            "assistant_id": request.path_params["assistant_id"],
            "graph_id": fields["graph_id"],
            "config": fields["config"],
            "context": fields["context"],
            "metadata": metadata,
            "name": fields["name"],
        }
        config, context = synced(fields["config"], fields["context"])
        check_graph(fields["graph_id"])
        row, _ = await changeable(request, value)
        new = replace(
            row,
            graph_id=fields["graph_id"] or row.graph_id,
            config=config or row.config,
            context=context if context is not None else row.context,
            metadata={**row.metadata, **metadata},
            name=fields["name"] if fields["name"] is not None else row.name,
            description=(
                fields["description"] if fields["description"] is not None else row.description
            ),
        )
        made = await api.call(store.assistant_update, row.assistant_id, new)
        if made is None:
            raise HTTPException(404, f"Assistant {row.assistant_id} not found")
        return JSONResponse(row_json(made))

    async def latest(request: Request, actor: str) -> Response:
        body = await api.json_body(request)
        version = body.get("version")
        if isinstance(version, bool) or not isinstance(version, int):
            raise HTTPException(
                422, f"version must be an integer (see POST .../versions), not {version!r}"
            )
        value = {"assistant_id": request.path_params["assistant_id"], "version": version}
        row, _ = await changeable(request, value)
        made = await api.call(store.assistant_set_latest, row.assistant_id, version)
        if made is None:
            raise HTTPException(
                404,
                f"Version {version} not found for assistant {row.assistant_id} (POST "
                f"/assistants/{row.assistant_id}/versions lists them)",
            )
        return JSONResponse(row_json(made))

    async def delete(request: Request, actor: str) -> Response:
        if request.query_params.get("delete_threads", "").lower() == "true":
            raise HTTPException(
                422,
                "delete_threads is not supported: a thread keeps its record when its "
                "assistant goes; delete threads one by one with DELETE /threads/{thread_id}",
            )
        row, _ = await changeable(request, {"assistant_id": request.path_params["assistant_id"]})
        await api.call(store.assistant_delete, row.assistant_id)
        return Response(status_code=204)

    def reader(fn: Any) -> Any:
        return about("assistants", api.reader(fn))

    def actor(fn: Any) -> Any:
        return about("assistants", api.actor(fn))

    one = "/assistants/{assistant_id}"
    return [
        Route("/assistants", actor(create), methods=["POST"]),
        Route("/assistants/search", reader(search), methods=["POST"]),
        Route("/assistants/count", reader(count), methods=["POST"]),
        Route(one, reader(get), methods=["GET"]),
        Route(one, actor(patch), methods=["PATCH"]),
        Route(one, actor(delete), methods=["DELETE"]),
        Route(one + "/versions", reader(versions), methods=["POST"]),
        Route(one + "/latest", actor(latest), methods=["POST"]),
        Route(one + "/graph", reader(graph)),
        Route(one + "/schemas", reader(schemas)),
        Route(one + "/subgraphs", reader(subgraphs)),
        Route(one + "/subgraphs/{namespace}", reader(subgraphs)),
    ]
