"""More of the LangGraph Server API's runs: cancel one run or many (``runs.cancel_many``),
delete a finished run's record, create a batch of stateless runs, and join a thread's
stream (``threads.join_stream``).

As everywhere, a request records and reads: the executor carries the runs out.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from longtask.errors import InvalidInput, ThreadNotFound, TooLateToCancel
from longtask.serve._executor import FINAL_RUN
from longtask.serve._json_body import read_json_body
from longtask.serve.access import caller_of
from longtask.serve.lgapi._json import run_json, sse

if TYPE_CHECKING:
    from longtask.serve.lgapi._common import Api
    from longtask.store._apiruns import ApiRun

#: the most runs one batch creates (a longer list is refused, nothing recorded)
MAX_BATCH = 100
#: what a thread's stream sends, as LangGraph's server names it (``stream_modes``)
THREAD_MODES = ("run_modes", "lifecycle", "state_update")
#: a Last-Event-ID as LangGraph's server takes one (a Redis stream id, or "-")
_EVENT_ID = re.compile(r"^(-|[0-9]+(-([0-9]+|\*))?)$")
#: seconds between reads of a run's status while the thread's stream waits for its end
_POLL = 0.1
#: how often an idle thread's stream looks for a new run, and how long it stays silent
_IDLE_POLL = 0.25
_HEARTBEAT = 10.0


#: what ``POST /runs/cancel`` cancels by status, as LangGraph's server names them
CANCEL_STATUSES = {"pending": ("pending",), "running": ("running",), "all": ("pending", "running")}


def refuse_action(request: Request) -> None:
    """A cancel's ``action`` other than ``interrupt``: a 422 saying what a cancel does."""
    action = request.query_params.get("action", "interrupt")
    if action != "interrupt":
        raise HTTPException(
            422,
            f"cancel action {action!r} is not supported: a cancel stops the run at its "
            "next step and undoes what the task's compensations undo (action=interrupt, "
            "the default); a thread's history is never rolled back or deleted by a cancel",
        )


async def cancel_run(api: Api, run: ApiRun, actor: str) -> None:
    """Cancel one run: a pending one ends ``interrupted`` (it never started); a running one's
    cancel is recorded and carried out by the executor (a finished one is left as it is)."""
    if run.status == "pending":
        await api.call(api.executor.end_run, run, "interrupted", None)
    elif run.status == "running":
        reason = f"run {run.run_id} cancelled"
        # Recorded before the answer: the run advancing the thread stops at its next step
        # and compensates, even if this process dies before its executor gets to the
        # cancel (which finishes one the run cannot, such as a paused thread's).
        too_late = False
        try:
            await api.call(api.runner.record_cancel, run.thread_id, reason=reason, by=actor)
        except TooLateToCancel:
            too_late = True  # the run has just completed: nothing to cancel
        except ThreadNotFound:
            pass  # taken a moment ago, not recorded yet: the executor cancels it
        if not too_late:
            api.executor.submit_cancel(run.thread_id, reason, actor)


def _cancel_body(body: dict[str, Any]) -> tuple[str | None, list[str], tuple[str, ...]]:
    """``POST /runs/cancel``'s body checked as LangGraph's server checks it: a ``status``,
    or a ``thread_id`` and its ``run_ids``, never both. (thread id, run ids, statuses)."""
    status = body.get("status")
    thread_id = body.get("thread_id")
    run_ids = body.get("run_ids")
    if status is not None:
        if not isinstance(status, str) or status.lower() not in CANCEL_STATUSES:
            raise HTTPException(
                422, f"Invalid status {status!r}: must be 'pending', 'running', or 'all'"
            )
        if thread_id or run_ids:
            raise HTTPException(
                422,
                "When providing a 'status', 'thread_id' and 'run_ids' must be omitted: "
                "a status cancels the runs with that status on every thread you may act on",
            )
        return None, [], CANCEL_STATUSES[status.lower()]
    if not isinstance(thread_id, str) or not thread_id or not isinstance(run_ids, list):
        raise HTTPException(
            422,
            'the body of /runs/cancel is {"thread_id": ..., "run_ids": [...]} or '
            '{"status": "pending" | "running" | "all"}',
        )
    if not all(isinstance(r, str) and r for r in run_ids):
        raise HTTPException(422, f"run_ids must be a list of run ids, not {run_ids!r}")
    return thread_id, run_ids, ()


def _thread_modes(request: Request) -> list[str]:
    """The thread stream's modes: ``stream_modes`` (comma-separated, as LangGraph's server
    reads it), else the SDKs' ``stream_mode``, else ``run_modes``."""
    given = request.query_params.get("stream_modes")
    modes = (
        [m.strip() for m in given.split(",")]
        if given
        else request.query_params.getlist("stream_mode")
    )
    modes = [m for m in modes if m] or ["run_modes"]
    for mode in modes:
        if mode not in THREAD_MODES:
            raise HTTPException(
                422,
                f"Invalid stream mode: {mode}; a thread's stream sends {', '.join(THREAD_MODES)}",
            )
    return modes


def routes(api: Api) -> list[Route]:
    runner = api.runner
    store = runner.db.store

    async def delete_run(request: Request, actor: str) -> Response:
        p = request.path_params
        found = await api.call(store.api_run_delete, p["run_id"], p["thread_id"])
        if found == "missing":
            raise HTTPException(404, f"no run {p['run_id']!r} of this thread")
        if found == "open":
            raise HTTPException(
                409,
                f"run {p['run_id']!r} has not ended: a run in progress is not deleted. "
                f"Cancel it (POST /threads/{p['thread_id']}/runs/{p['run_id']}/cancel) or "
                "wait for it (GET .../join), then delete it",
            )
        if found == "webhook":
            raise HTTPException(
                409,
                f"run {p['run_id']!r} has ended, but its webhook is still being delivered; "
                "delete it once the delivery is done",
            )
        return Response(status_code=204)

    def check_batch(items: list[Any], actor: str) -> list[tuple[Any, dict[str, Any]]]:
        """Every run of the batch checked before any is recorded: (assistant, body)."""
        checked = []
        assert api.check_run is not None
        for i, body in enumerate(items):
            where = f"run {i} of the batch"
            if not isinstance(body, dict):
                raise HTTPException(422, f"{where} must be an object, not {body!r}")
            if "assistant_id" not in body:
                raise HTTPException(422, f"{where}: assistant_id is required")
            try:
                entry = api.registry.get(str(body["assistant_id"]))
            except LookupError as exc:
                raise HTTPException(404, f"{where}: {exc}") from None
            try:
                api.check_run(None, entry, body, actor)
            except HTTPException as exc:
                raise HTTPException(exc.status_code, f"{where}: {exc.detail}") from None
            except InvalidInput as exc:
                raise InvalidInput(f"{where}: {exc}") from None
            checked.append((entry, body))
        return checked

    def record_batch(items: list[Any], actor: str) -> list[ApiRun]:
        assert api.prepare is not None
        checked = check_batch(items, actor)
        # Checked, each a run of a new thread of its own: recorded one after another.
        return [api.prepare(None, entry, body, actor) for entry, body in checked]

    def to_cancel(caller: Any, body: dict[str, Any]) -> list[ApiRun]:
        """The runs a cancel names that the caller may act on (checked, nothing written)."""
        thread_id, run_ids, statuses = _cancel_body(body)
        if thread_id is not None:
            may = api.access.acts_on(caller, thread_id)
            if may is None:
                raise HTTPException(404, f"no thread {thread_id!r}")
            if not may:
                raise HTTPException(
                    403, f"{caller.name!r} may not cancel the runs of thread {thread_id!r}"
                )
            found = [store.api_run(r) for r in dict.fromkeys(run_ids)]
            runs = [r for r in found if r is not None and r.thread_id == thread_id]
        else:
            # Every open run with that status, of the threads the caller may act on: a
            # user's own (or those the auth handler's filter passes), an admin's every one.
            runs = [
                r
                for r in store.api_runs_open()
                if r.status in statuses and api.access.acts_on(caller, r.thread_id)
            ]
        if not runs:
            raise HTTPException(404, "No runs found to cancel.")
        open_runs = [r for r in runs if r.status not in FINAL_RUN]
        if not open_runs:
            # Found, but every one has ended: nothing to cancel, as LangGraph's server says
            raise HTTPException(
                404,
                "No matching runs to cancel: the runs named have ended (GET "
                f"/threads/{runs[0].thread_id}/runs lists a thread's runs and their status)",
            )
        return open_runs

    async def cancel_many(request: Request, actor: str) -> Response:
        refuse_action(request)
        body = await api.json_body(request)
        runs = await api.call(to_cancel, caller_of(request), body)
        for run in runs:
            # A run that ends meanwhile is left as it is (cancel_run cancels an open one).
            await cancel_run(api, run, actor)
        return Response(status_code=204)

    async def create_batch(request: Request, actor: str) -> Response:
        items = await read_json_body(request)
        if not isinstance(items, list) or not items:
            raise HTTPException(
                422,
                "the body of /runs/batch is a non-empty JSON array of runs, each as POST "
                '/runs takes one: [{"assistant_id": ..., "input": ...}, ...]',
            )
        if len(items) > MAX_BATCH:
            raise HTTPException(
                422, f"a batch holds at most {MAX_BATCH} runs, not {len(items)}: send several"
            )
        runs = await api.call(record_batch, items, actor)
        return JSONResponse([run_json(r) for r in runs])

    async def until_ended(run: ApiRun) -> None:
        while run.status not in FINAL_RUN:
            await anyio.sleep(_POLL)
            found = await api.call(store.api_run, run.run_id)
            if found is None:
                return
            run = found

    def replayed(thread_id: str) -> list[ApiRun]:
        """The thread's ended runs whose streams were asked to be resumable, oldest first:
        what a Last-Event-ID replays (LangGraph's server keeps those runs' parts)."""
        runs = store.api_runs(thread_id, limit=1000)
        return [
            r
            for r in reversed(runs)
            if r.status in FINAL_RUN and (r.request.get("kwargs") or {}).get("resumable")
        ]

    def unseen_runs(thread_id: str, before: set[str], seen: set[str]) -> list[ApiRun] | None:
        """The thread's runs this stream has not sent, oldest first, leaving out the ones
        that had ended before it joined (``before``); None once the thread is gone."""
        runs = store.api_runs(thread_id, limit=100)
        if not runs and not store.thread_owner(thread_id)[0]:
            return None
        return [r for r in reversed(runs) if r.run_id not in seen and r.run_id not in before]

    async def thread_parts(
        thread_id: str, modes: list[str], last_event_id: str | None
    ) -> AsyncIterator[bytes]:
        """The thread's runs as they come, as LangGraph's server streams a thread: the open
        ones, then each run started later (the stream stays open for them, with a comment
        line every ``_HEARTBEAT`` seconds so proxies keep it and a gone client is noticed),
        until the client leaves or the thread is deleted."""
        assert api.run_parts is not None
        seen: set[str] = set()
        queue: list[ApiRun] = []
        if last_event_id is not None:
            queue = await api.call(replayed, thread_id)
        ended = await api.call(store.api_runs, thread_id, limit=1000)
        before = {r.run_id for r in ended if r.status in FINAL_RUN}
        quiet = 0.0
        while True:
            if not queue:
                found = await api.call(unseen_runs, thread_id, before, seen)
                if found is None:
                    return  # the thread was deleted
                queue = found
                if not queue:
                    await anyio.sleep(_IDLE_POLL)
                    quiet += _IDLE_POLL
                    if quiet >= _HEARTBEAT:
                        quiet = 0.0
                        yield b": heartbeat\n\n"
                    continue
            quiet = 0.0
            run = queue.pop(0)
            seen.add(run.run_id)
            if "run_modes" in modes:
                async for chunk in api.run_parts(run, None):
                    yield chunk
            else:
                if "lifecycle" in modes:
                    yield sse("metadata", {"run_id": run.run_id, "attempt": 1})
                await until_ended(run)
            if "run_modes" in modes or "lifecycle" in modes:
                yield sse("metadata", {"status": "run_done", "run_id": run.run_id})

    async def join_thread_stream(request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        exists, _ = await api.call(store.thread_owner, thread_id)
        if not exists:
            raise HTTPException(404, f"no thread {thread_id!r}")
        last_event_id = request.headers.get("last-event-id") or None
        if last_event_id is not None and not _EVENT_ID.match(last_event_id):
            raise HTTPException(
                422,
                "Invalid last-event-id: must be a valid Redis stream ID (like "
                "1724342400000-0), or - to replay the thread's resumable runs",
            )
        modes = _thread_modes(request)
        return StreamingResponse(
            thread_parts(thread_id, modes, last_event_id),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return [
        Route("/runs/batch", api.actor(create_batch), methods=["POST"]),
        Route("/runs/cancel", api.actor(cancel_many), methods=["POST"]),
        Route("/threads/{thread_id}/runs/{run_id}", api.actor(delete_run), methods=["DELETE"]),
        Route("/threads/{thread_id}/stream", api.reader(join_thread_stream), methods=["GET"]),
    ]
