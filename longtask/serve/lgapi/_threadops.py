"""The LangGraph Server API's thread copies and prunes (``threads.copy``,
``threads.prune``), on longtask's own copy (``ops._copy``) and retention (``ops._prune``),
and a thread's storage (``GET /threads/{thread_id}/storage``: the bytes its checkpoints
occupy, see ``store._storage``).

A copy is a longtask thread of its own, owned by whoever copied it, with the source's
state, history and effect ledger (see ``ops._copy`` for what a copy of a paused thread
does with its pause). A prune deletes (``delete``) or trims to the latest checkpoint
(``keep_latest``) ended threads the caller may act on, as ``longtask prune`` and
``Runner.delete`` do; it is checked whole before anything is deleted.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from longtask.errors import InvalidInput, MoveRefused, ThreadExists
from longtask.runtime._threadid import check_thread_id
from longtask.serve.access import OWNER_KEY, Caller, caller_of, copier
from longtask.serve.lgapi._state import thread_json
from longtask.store import FINAL_STATUSES
from longtask.store._storage import thread_storage

if TYPE_CHECKING:
    from longtask.serve.lgapi._common import Api

#: what a prune does, as LangGraph's server names it
STRATEGIES = ("delete", "keep_latest")
#: the most threads one prune names
MAX_PRUNE = 1000


def routes(api: Api) -> list[Route]:
    runner = api.runner
    store = runner.db.store

    def copy(source: str, new_id: str, actor: str, metadata: dict[str, Any]) -> Any:
        if store.get_thread(source) is None:
            if store.api_thread(source) is None:
                # LangGraph's server answers a copy of a missing thread with 409
                raise HTTPException(409, f"no thread {source!r} to copy")
            # A thread created through the API that has not run: its record is all it has.
            store.api_thread_put(new_id, metadata, owner=actor)
        else:
            try:
                runner.copy_thread(source, new_id, owner=actor, by=actor, metadata=metadata)
            except MoveRefused as exc:
                raise HTTPException(409, str(exc)) from None
            except ThreadExists:
                raise HTTPException(409, f"thread {new_id!r} exists already") from None
        found = thread_json(runner, api.registry, new_id)
        assert found is not None
        # What LangGraph's server answers: the new thread's record, without its values,
        # interrupts or error (threads.get reads them); its status is the copy's own.
        shown = {k: v for k, v in found.items() if k not in ("values", "interrupts", "error")}
        return {**shown, "config": {}}

    async def copy_thread(request: Request, actor: str) -> Response:
        await api.json_body(request)  # none is needed; one that is not an object is refused
        source = request.path_params["thread_id"]
        made = await api.call(store.api_thread, source)
        # The copy's metadata is the source's; as on LangGraph's server, the create
        # handler is asked too, and may change it (set the copy's owner, say).
        value: dict[str, Any] = {
            "thread_id": str(uuid.uuid4()),
            "metadata": dict(made[0]) if made else {},
        }
        await api.access.ask(request, "threads", "create", value)
        if OWNER_KEY in value["metadata"] and (
            api.access.handlers is None or caller_of(request).role != "user"
        ):
            # No handler decides: the copy is its copier's, and so says its metadata.
            value["metadata"][OWNER_KEY] = actor
        found = await api.call(copy, source, value["thread_id"], actor, dict(value["metadata"]))
        return JSONResponse(found)

    def targets(ids: list[str], caller: Caller) -> list[tuple[str, str | None]]:
        """The threads a prune acts on (id, status; None for a thread with no run), all
        checked before any is pruned; a thread that does not exist is skipped, and so is
        one the caller may not see: the same answer, which tells nothing of it."""
        out = []
        for thread_id in dict.fromkeys(ids):
            allowed = api.access.acts_on(caller, thread_id)
            if allowed is None:
                continue
            if not allowed:
                raise HTTPException(
                    403, f"{caller.name!r} may not act on thread {thread_id!r}; nothing was pruned"
                )
            rec = store.get_thread(thread_id)
            if store.api_runs_open_of(thread_id):
                state = "has a run in progress"
            elif rec is not None and rec.status not in FINAL_STATUSES:
                state = f"is {rec.status}"
            else:
                state = ""
            if state:
                raise InvalidInput(
                    f"thread {thread_id!r} {state}, not ended: longtask prunes only "
                    f"completed, failed or cancelled threads. Cancel it first (`longtask "
                    f"cancel {thread_id}`), or leave it out; nothing was pruned"
                )
            out.append((thread_id, rec.status if rec is not None else None))
        return out

    def prune(ids: list[str], strategy: str, caller: Caller) -> int:
        count = 0
        for thread_id, status in targets(ids, caller):
            if status is None:
                # A thread the API created, never run: it has no history to trim.
                if strategy == "delete":
                    store.api_thread_delete(thread_id)
            elif strategy == "delete":
                runner.delete(thread_id)
            else:
                runner.trim(thread_id)
            count += 1
        return count

    async def prune_threads(request: Request, actor: str) -> Response:
        body = await api.json_body(request)
        ids = body.get("thread_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise HTTPException(422, "thread_ids must be a list of thread ids")
        if len(ids) > MAX_PRUNE:
            raise HTTPException(422, f"a prune names at most {MAX_PRUNE} threads, not {len(ids)}")
        for thread_id in ids:
            try:
                check_thread_id(thread_id)
            except InvalidInput as exc:
                raise HTTPException(422, f"thread_ids: {exc}") from None
        strategy = body.get("strategy", "delete")
        if strategy not in STRATEGIES:
            raise HTTPException(
                422, f"Invalid strategy: {strategy}. Expected 'delete' or 'keep_latest'."
            )
        if not ids:
            return JSONResponse({"pruned_count": 0})
        count = await api.call(prune, ids, strategy, caller_of(request))
        return JSONResponse({"pruned_count": count})

    async def storage(request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        exists, _ = await api.call(store.thread_owner, thread_id)
        if not exists:
            raise HTTPException(404, f"no thread {thread_id!r}")
        found = await api.call(thread_storage, store, thread_id)
        return JSONResponse({"thread_id": thread_id, **found})

    return [
        Route("/threads/prune", api.actor(prune_threads), methods=["POST"]),
        Route("/threads/{thread_id}/storage", api.reader(storage), methods=["GET"]),
        Route("/threads/{thread_id}/copy", copier(copy_thread), methods=["POST"]),
    ]
