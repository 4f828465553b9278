"""The LangGraph Server API's threads: create, get, search, state, history, delete.

A thread created through the API has no longtask thread record until a run starts on it:
until then it is a row of ``longtask_api_threads`` (status ``idle``, no values).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from longtask.errors import InvalidInput, ThreadNotFound
from longtask.model import GraphApp
from longtask.runtime._gate import through
from longtask.runtime._threadid import check_thread_id
from longtask.serve.access import Caller, caller_of, check_owner_key
from longtask.serve.lgapi._body import (
    id_text,
    integer_field,
    mapping_field,
    strings_field,
    text_field,
)
from longtask.serve.lgapi._state import (
    config_of,
    empty_state,
    thread_history,
    thread_json,
    thread_state,
)
from longtask.serve.lgapi.resources._crons import drop_thread_crons
from longtask.store._visible import VISIBLE_ORDER

if TYPE_CHECKING:
    from longtask.serve.lgapi._common import Api, Handler

#: metadata keys a thread's JSON takes from longtask's record
RESERVED = ("graph_id", "assistant_id", "longtask_status", "longtask_error")


def _taken(thread_id: str) -> str:
    """The answer to creating a thread whose id another thread, one the caller may not see,
    has: the same for any such id, so it tells nothing of that thread."""
    return (
        f"thread id {thread_id!r} cannot be used: choose another id, or leave thread_id out "
        "for a new one"
    )


#: what threads.search sorts by
_SORTS = ("thread_id", "status", "created_at", "updated_at")


def routes(api: Api) -> tuple[list[Route], Handler]:
    runner = api.runner
    store = runner.db.store

    def busy(thread_id: str) -> bool:
        return any(r.status in ("pending", "running") for r in store.api_runs(thread_id, limit=20))

    def get_json(thread_id: str) -> dict[str, Any]:
        found = thread_json(runner, api.registry, thread_id, busy=busy(thread_id))
        if found is None:
            raise ThreadNotFound(thread_id, runner.db.url.redacted)
        return found

    def make(body: dict[str, Any], actor: str, seen: bool | None) -> dict[str, Any]:
        """Create the thread ``body`` asks for. ``seen``: whether the caller may see a
        thread with the id it names (None: there was none when asked). An id taken by a
        thread the caller may not see gets one answer, whatever ``if_exists`` says, that
        never says the thread exists nor shows it."""
        if body.get("supersteps"):
            raise HTTPException(
                422,
                "supersteps is not supported: a longtask thread's history is made by running "
                "its task; create the thread, start a run, and set a step's result with "
                "update_state (POST /threads/{thread_id}/state) if needed",
            )
        thread_id = text_field(body, "thread_id") or str(uuid.uuid4())
        check_thread_id(thread_id)
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise HTTPException(422, "thread metadata must be an object")
        graph_id = metadata.get("graph_id")
        if graph_id is not None and api.registry.find(str(graph_id)) is None:
            raise HTTPException(404, f"no assistant {graph_id!r}")
        exists = store.get_thread(thread_id) is not None
        if exists or not store.api_thread_put(thread_id, metadata, owner=actor):
            if seen is not True:
                raise HTTPException(409, _taken(thread_id))
            if body.get("if_exists") == "do_nothing":
                return get_json(thread_id)
            raise HTTPException(409, f"thread {thread_id!r} exists already")
        return get_json(thread_id)

    def search(body: dict[str, Any], caller: Caller, count: bool = False) -> Any:
        """A page of the threads the caller sees (or, with ``count``, how many match).
        Who sees what is in the query (``Access.scope``), and so is the page when no
        filter needs a thread's derived status or metadata: ``offset`` and ``limit`` count
        only the caller's threads."""
        limit = integer_field(body, "limit", 10, 1, 100_000)
        offset = integer_field(body, "offset", 0, 0, 10**9)
        ids = strings_field(body, "ids") or None
        status = text_field(body, "status")
        metadata = mapping_field(body, "metadata")
        sort_by = text_field(body, "sort_by") or "created_at"
        if sort_by not in _SORTS:
            raise HTTPException(422, f"sort_by must be one of {', '.join(_SORTS)}, not {sort_by!r}")
        order = text_field(body, "sort_order") or "desc"
        if order not in ("asc", "desc"):
            raise HTTPException(422, f"sort_order must be asc or desc, not {order!r}")
        select = strings_field(body, "select")
        scope = api.access.scope(caller)
        name, passes, wanted = scope.name, scope.passes, scope.metadata
        descending = order == "desc"
        by_sql = sort_by if sort_by in VISIBLE_ORDER else "created_at"
        if passes is None and not status and not metadata and sort_by == by_sql:
            if count:
                return store.count_visible_threads(name, ids, wanted)
            found_ids = store.visible_thread_ids(
                name,
                sort=sort_by,
                descending=descending,
                limit=limit,
                offset=offset,
                ids=ids,
                metadata=wanted,
            )
            out = [t for t in (one_json(i) for i in found_ids) if t is not None]
        else:
            # A filter on what only a thread's JSON says: every thread the caller sees,
            # filtered here, then paged.
            out = []
            for thread_id in store.visible_thread_ids(
                name, sort=by_sql, descending=descending, ids=ids, metadata=wanted
            ):
                if passes is not None and not passes(thread_id):
                    continue
                found = one_json(thread_id)
                if found is None:
                    continue
                if status and found["status"] != status:
                    continue
                if any(found["metadata"].get(k) != v for k, v in metadata.items()):
                    continue
                out.append(found)
            if sort_by != by_sql:
                out.sort(key=lambda t: str(t.get(sort_by) or ""), reverse=descending)
            if count:
                return len(out)
            out = out[offset : offset + limit]
        if select:
            out = [{k: t.get(k) for k in select} for t in out]
        return out

    def one_json(thread_id: str) -> dict[str, Any] | None:
        return thread_json(runner, api.registry, thread_id, busy=busy(thread_id))

    def state(
        thread_id: str, checkpoint_id: str | None = None, subgraphs: bool = False
    ) -> dict[str, Any]:
        rec = store.get_thread(thread_id)
        if rec is None:
            get_json(thread_id)  # 404 unless the API created it
            return empty_state(thread_id)
        return thread_state(runner, api.registry, rec, checkpoint_id, subgraphs=subgraphs)

    def history(thread_id: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        # As LangGraph's server filters a history: ``limit`` (1 unless given), ``before``
        # (a checkpoint id or config), ``metadata`` (what the checkpoints' metadata holds),
        # ``checkpoint`` (that one checkpoint). Checked before the thread is read.
        limit = integer_field(body, "limit", 1, 1, 10_000)
        before = body.get("before")
        if isinstance(before, dict):
            before = before.get("checkpoint_id") or (before.get("configurable") or {}).get(
                "checkpoint_id"
            )
        if before is not None and not isinstance(before, str):
            raise HTTPException(
                422, f"before must be a checkpoint id or a checkpoint config, not {before!r}"
            )
        id_text(before, "before")
        metadata = mapping_field(body, "metadata") or None
        checkpoint = mapping_field(body, "checkpoint")
        if checkpoint.get("checkpoint_ns") not in (None, ""):
            raise HTTPException(
                422,
                "a history of a subgraph's namespace (checkpoint.checkpoint_ns) is not "
                "served: a step's own checkpoints are in get_state(subgraphs=True); send "
                'checkpoint_ns "" or none',
            )
        at = id_text(checkpoint.get("checkpoint_id"), "checkpoint.checkpoint_id")
        rec = store.get_thread(thread_id)
        if rec is None:
            get_json(thread_id)
            return []
        return thread_history(
            runner, api.registry, rec, limit=limit, before=before, metadata=metadata, at=at
        )

    def update_state(thread_id: str, body: dict[str, Any], actor: str) -> dict[str, Any]:
        rec = store.get_thread(thread_id)
        if rec is None:
            get_json(thread_id)
            raise InvalidInput(f"thread {thread_id!r} has not started: there is no state yet")
        checkpoint_id = body.get("checkpoint_id")
        if checkpoint_id is not None and not isinstance(checkpoint_id, str):
            raise HTTPException(
                422, f"checkpoint_id must be a checkpoint id, not {checkpoint_id!r}"
            )
        if body.get("values") is None and body.get("as_node") == "__end__":
            return _mark_resolved(thread_id, rec.status, checkpoint_id, actor)
        entry = api.registry.find(rec.task_name)
        task = entry.for_thread(rec) if entry is not None else runner.engine.load(rec)
        if isinstance(task, GraphApp):
            # Its state is the served graph's own, which a run changes: refused rather than
            # written to the task around it (nothing is stored).
            raise HTTPException(
                409,
                f"thread {thread_id!r} runs a served LangGraph graph: update_state of its "
                "state is not supported. Send the change as a run's input (POST "
                f"/threads/{thread_id}/runs with input), or branch the thread with a run with "
                "input from a past checkpoint_id",
            )
        # The gate decides (runtime._gate): this door only names itself and who asks.
        with through("server.state", actor):
            config = runner.graph(task).update_state(
                config_of(thread_id, checkpoint_id), body.get("values"), as_node=body.get("as_node")
            )
        conf = config["configurable"]
        where = {
            "thread_id": thread_id,
            "checkpoint_ns": conf.get("checkpoint_ns", ""),
            "checkpoint_id": conf.get("checkpoint_id"),
        }
        # Both shapes LangGraph's server answers with (the JS SDK reads `configurable`).
        return {
            "checkpoint": where,
            "configurable": where,
            "checkpoint_id": where["checkpoint_id"],
        }

    def _mark_resolved(
        thread_id: str, status: str, checkpoint_id: str | None, actor: str
    ) -> dict[str, Any]:
        """An empty update as ``__end__`` (Agent Inbox's "Mark as Resolved"): on LangGraph's
        server the graph ends where it waits. A longtask thread ends by a cancel, which runs
        its compensations and is recorded: the pause ends that way, by the caller, with the
        reason saying how it was asked; nothing is answered, nothing after it runs."""
        if not status.startswith("waiting") or checkpoint_id is not None:
            what = "names a past checkpoint" if checkpoint_id is not None else f"is {status}"
            raise HTTPException(
                409,
                f"an empty update as __end__ (Mark as Resolved) ends a pause, and this request "
                f"{what}, not the pause of thread {thread_id!r}. To end the thread, cancel it "
                f"(POST /api/threads/{thread_id}/cancel, or longtask cancel {thread_id}); to "
                "change its state, send values",
            )
        assert api.cancel is not None, "set by create_app"
        api.cancel(
            thread_id,
            "marked as resolved (an empty state update as __end__, Agent Inbox's Mark as "
            "Resolved): the pause ends unanswered",
            actor,
        )
        found = runner.db.saver.get_tuple(config_of(thread_id))
        head = found.config["configurable"].get("checkpoint_id") if found is not None else None
        where = {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": head}
        return {"checkpoint": where, "configurable": where, "checkpoint_id": head}

    def patch(
        thread_id: str, body: dict[str, Any], edited: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Merge the body's metadata into the thread's; ``edited``: the metadata as an auth
        handler's ``update`` left it (None: no handler decided), which is what is stored."""
        get_json(thread_id)
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise HTTPException(422, "thread metadata must be an object")
        if edited is not None:
            metadata = edited
        else:
            check_owner_key(metadata, store.thread_owner(thread_id)[1], "the thread")
        reserved = [k for k in metadata if k in RESERVED]
        if reserved:
            raise InvalidInput(f"metadata {', '.join(reserved)} is longtask's own: not settable")
        store.api_thread_merge(thread_id, metadata)
        return get_json(thread_id)

    def delete(thread_id: str) -> None:
        rec = store.get_thread(thread_id)
        if rec is None:
            get_json(thread_id)
            store.api_thread_delete(thread_id)
            drop_thread_crons(store, thread_id)  # as LangGraph's server: they go with it
            return
        raise HTTPException(
            409,
            f"thread {thread_id!r} has run task {rec.task_name!r}: longtask keeps its record "
            f"and history; cancel it (`longtask cancel {thread_id}`) to stop it",
        )

    # -- handlers --------------------------------------------------------------------------

    async def create_thread(request: Request, actor: str) -> Response:
        body = await api.json_body(request)
        edited = getattr(request.state, "handler_metadata", None)
        if edited is not None:  # an auth handler's edits (LangGraph's `@auth.on` owner)
            body["metadata"] = edited
        else:
            check_owner_key(body.get("metadata"), actor, "the new thread")
        given = text_field(body, "thread_id")
        seen = None
        if given:
            check_thread_id(given)
            # A door that names a thread in its body asks what its path would: a thread
            # the caller may not see is neither shown nor said to exist (``make``).
            seen = await api.access.sees(caller_of(request), given)
        return JSONResponse(await api.call(make, body, actor, seen))

    async def search_threads(request: Request) -> Response:
        body = await api.json_body(request)
        return JSONResponse(await api.call(search, body, caller_of(request)))

    async def count_threads(request: Request) -> Response:
        body = await api.json_body(request)
        for paging in ("limit", "offset"):  # a count counts every match
            body.pop(paging, None)
        return JSONResponse(await api.call(search, body, caller_of(request), True))

    async def get_thread(request: Request) -> Response:
        return JSONResponse(await api.call(get_json, request.path_params["thread_id"]))

    async def get_state(request: Request) -> Response:
        p = request.path_params
        subgraphs = request.query_params.get("subgraphs", "").lower() in ("1", "true", "yes")
        return JSONResponse(
            await api.call(state, p["thread_id"], p.get("checkpoint_id"), subgraphs)
        )

    async def post_state_checkpoint(request: Request) -> Response:
        body = await api.json_body(request)
        checkpoint = mapping_field(body, "checkpoint")
        checkpoint_id = id_text(checkpoint.get("checkpoint_id"), "checkpoint.checkpoint_id")
        found = await api.call(
            state, request.path_params["thread_id"], checkpoint_id, bool(body.get("subgraphs"))
        )
        return JSONResponse(found)

    async def post_state(request: Request, actor: str) -> Response:
        body = await api.json_body(request)
        return JSONResponse(
            await api.call(update_state, request.path_params["thread_id"], body, actor)
        )

    async def get_history(request: Request) -> Response:
        body = await api.json_body(request) if request.method == "POST" else {}
        if request.method == "GET":
            body = dict(request.query_params)
            if "limit" in body:
                try:
                    body["limit"] = int(body["limit"])
                except ValueError:
                    raise HTTPException(
                        422, f"limit must be an integer, not {body['limit']!r}"
                    ) from None
        return JSONResponse(await api.call(history, request.path_params["thread_id"], body))

    async def update_thread(request: Request, actor: str) -> Response:
        body = await api.json_body(request)
        edited = getattr(request.state, "handler_metadata", None)
        return JSONResponse(await api.call(patch, request.path_params["thread_id"], body, edited))

    async def delete_thread(request: Request, actor: str) -> Response:
        await api.call(delete, request.path_params["thread_id"])
        return Response(status_code=204)

    one = "/threads/{thread_id}"
    return [
        Route("/threads", api.actor(create_thread), methods=["POST"]),
        Route("/threads/search", api.reader(search_threads), methods=["POST"]),
        Route("/threads/count", api.reader(count_threads), methods=["POST"]),
        Route(one + "/state", api.reader(get_state), methods=["GET"]),
        Route(one + "/state", api.actor(post_state), methods=["POST"]),
        Route(one + "/state/checkpoint", api.reader(post_state_checkpoint), methods=["POST"]),
        Route(one + "/state/{checkpoint_id}", api.reader(get_state), methods=["GET"]),
        Route(one + "/history", api.reader(get_history), methods=["GET", "POST"]),
        Route(one, api.actor(delete_thread), methods=["DELETE"]),
        Route(one, api.actor(update_thread), methods=["PATCH"]),
        # GET of a thread is in the app: a browser (Accept: text/html) gets the page
    ], get_thread
