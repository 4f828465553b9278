"""The HTTP API: JSON reads, token-guarded actions, an SSE event stream and two pages.

Runner calls block (an approval runs the thread on until it completes or pauses), so every
one runs in a worker thread; the event loop only parses requests and streams events.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import longtask.serve.lgapi._runops as lg_runops
import longtask.serve.lgapi._runs as lg_runs
import longtask.serve.lgapi._threadops as lg_threadops
import longtask.serve.lgapi._threads as lg_threads
import longtask.serve.lgapi._unserved as lg_unserved
import longtask.serve.lgapi.resources._assistants as lg_assistants
import longtask.serve.lgapi.resources._crons as lg_crons
from longtask._version import __version__
from longtask.errors import (
    InvalidInput,
    LongTaskError,
    TooLateToCancel,
    describe_validation,
)
from longtask.ops._reports import report_name
from longtask.runtime._metrics import (
    CONTENT_TYPE,
    READY_TIMEOUT,
    Readiness,
    exposition,
    metrics_registry,
)
from longtask.serve._cors import cors_middleware
from longtask.serve._executor import Executor
from longtask.serve._hints import Hints
from longtask.serve._http import (
    LoopbackHostOnly,
    NoNulBytes,
    artifact_response,
    error,
    int_param,
    int_value,
    jsonable,
    on_http_error,
    on_internal_error,
    on_longtask_error,
    page_response,
)
from longtask.serve._json_body import MAX_BODY, BodyLimit, read_json_body
from longtask.serve._manual import final_results, retry_later, skip_later
from longtask.serve._openapi import describe
from longtask.serve._registry import Registry, assistant_id
from longtask.serve._schedules import ScheduleLoop, schedules_route
from longtask.serve._stream import EventStream
from longtask.serve._userapp import HttpSettings, app_routes
from longtask.serve._userapp import described as described_app
from longtask.serve._webhooks import WebhookPolicy
from longtask.serve.access import (
    Access,
    Answering,
    Handlers,
    Tokens,
    actor,
    answerer,
    caller_of,
    check_roles,
    everything,
    page,
    public,
    reader,
    signed_in,
)
from longtask.serve.lgapi._commands import plan_answer
from longtask.serve.lgapi._common import Api
from longtask.serve.lgapi.protocols._a2a import A2aEndpoint
from longtask.serve.lgapi.protocols._mcp import McpEndpoint
from longtask.serve.lgapi.resources._store import StoreRoutes
from longtask.serve.page import FAVICON, index_page, thread_page
from longtask.store import THREAD_SORTS

if TYPE_CHECKING:
    from longtask._runner import Runner

log = logging.getLogger("longtask.serve")
T = TypeVar("T")
Model = TypeVar("Model", bound=BaseModel)


class DecisionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: str | None = None
    plan_hash: str | None = None
    comment: str | None = None


class SignalBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    payload: Any = None


class AnswerBody(BaseModel):
    """The answer to a graph step's own interrupt: its id, and the value (any JSON) the
    graph's interrupt() returns."""

    model_config = ConfigDict(extra="forbid")
    interrupt: str
    value: Any = None


class ResolveBody(BaseModel):
    """What became of an effect cut off mid-call (the pause that waits on it): it
    ``succeeded`` with ``result``, ``failed`` (``reason``: why), or ``retry``: call it
    again."""

    model_config = ConfigDict(extra="forbid")
    key: str
    outcome: Literal["succeeded", "failed", "retry"]
    result: Any = None
    reason: str | None = None


class CancelBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = None


class RetryBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: str | None = None


class SkipBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: str
    result: Any = None


def create_app(
    runner: Runner,
    tokens: Mapping[str, str] | None = None,
    *,
    roles: Mapping[str, str] | None = None,
    token_hashes: Mapping[str, str] | None = None,
    auth_handler: Any = None,
    loopback_hosts_only: bool = False,
    poll: float = 0.25,
    heartbeat: float = 10.0,
    registry: Registry | None = None,
    run_workers: int = 4,
    to_workers: bool = False,
    schedule_poll: float | None = 5.0,
    cors_origins: Sequence[str] | None = None,
    ready_timeout: float = READY_TIMEOUT,
    webhooks: WebhookPolicy | None = None,
    max_body: int = MAX_BODY,
    http: HttpSettings | None = None,
) -> Starlette:
    """The Starlette app of ``longtask serve`` over ``runner``.

    ``tokens`` maps bearer tokens to the names that act with them, ``roles`` names to
    their roles (``admin``, ``viewer``; ``user`` by default), ``token_hashes`` the hex
    SHA-256 of more tokens to their names (a tokens file's). Who may see and do what is
    decided by one gate in front of every route (``longtask.serve.access``); with no
    token configured the app is in open mode: anyone reads everything, nobody acts.
    ``auth_handler``: a ``langgraph_sdk.Auth`` whose handlers identify every caller and
    decide as they do on LangGraph's server (``longtask.serve.access``).
    ``loopback_hosts_only`` refuses requests whose ``Host`` header is not a loopback name.
    ``registry`` holds the tasks the LangGraph Server API offers as assistants; its runs are
    carried out by an executor of ``run_workers`` threads, which on startup continues runs
    and threads a process that died left unfinished; ``to_workers`` starts them as threads
    served by workers (``longtask worker``, PostgreSQL) instead. Every ``schedule_poll``
    seconds (None: never) due schedules fire; the registered tasks' declared schedules are
    registered when it starts. ``cors_origins``: the origins whose pages may call the API
    from a browser (None: loopback pages; see ``longtask.serve._cors``).
    ``ready_timeout``: seconds ``GET /ready`` waits for the database before it answers 503.
    ``webhooks``: how runs' webhooks are delivered (attempts, backoff, timeout).
    ``max_body``: the largest request body taken, in bytes (larger: 413).
    ``http``: a config file's ``http`` settings (``longtask.serve._userapp``): the app's own
    routes beside the API, the API's groups turned off, CORS (``cors_origins`` wins).
    """
    http = http or HttpSettings()
    handlers = Handlers(auth_handler) if auth_handler is not None else None
    access = Access(runner, Tokens(tokens or {}, token_hashes), check_roles(roles or {}), handlers)
    open_reads = access.open
    hints = Hints(runner.db.url.raw)
    tasks = registry or Registry()
    events = EventStream(runner, poll=poll, heartbeat=heartbeat)

    async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await run_in_threadpool(fn, *args, **kwargs)

    async def body(request: Request, model: type[Model]) -> Model:
        data = await read_json_body(request)
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise HTTPException(400, "the body must be a JSON object")
        if "by" in data:
            raise HTTPException(
                400, "'by' is not accepted: whoever acts is the name of the bearer token"
            )
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise HTTPException(400, describe_validation(exc)) from None

    async def new_status(thread_id: str, code: int = 200) -> Response:
        status = await call(runner.status, thread_id)
        return JSONResponse(status.model_dump(mode="json"), status_code=code)

    # -- reads ---------------------------------------------------------------------------

    async def list_threads(request: Request) -> Response:
        limit = int_param(request, "limit", 100, low=1, high=1000)
        status = request.query_params.get("status") or None
        sort = request.query_params.get("sort") or "updated"
        if sort not in THREAD_SORTS:
            raise HTTPException(400, f"sort must be one of {', '.join(THREAD_SORTS)}")
        # The caller's threads are chosen in the query: the limit counts what they see.
        scope = access.scope(caller_of(request))
        passes = scope.passes
        records = await call(
            runner.threads_with_cost,
            limit=limit if passes is None else 10_000,
            status=status,
            sort=sort,
            visible_to=scope.name,
            visible_meta=scope.metadata,
        )
        if passes is not None:
            # An auth handler's filter on metadata is matched as LangGraph's server does.
            records = [r for r in records if await call(passes, r.thread_id)][:limit]
        return JSONResponse([r.to_json() for r in records])

    async def thread_status(request: Request) -> Response:
        return await new_status(request.path_params["thread_id"])

    async def report(request: Request) -> Response:
        """The thread's report as one file: HTML (the default) or Markdown, charts embedded."""
        thread_id = request.path_params["thread_id"]
        fmt = request.query_params.get("format") or "html"
        if fmt not in ("html", "md"):
            raise HTTPException(400, "format must be html or md")
        text = await call(runner.report_document, thread_id, fmt)
        media = "text/html" if fmt == "html" else "text/markdown"
        name = report_name(thread_id, fmt)
        return Response(
            text,
            media_type=f"{media}; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    async def pending(request: Request) -> Response:
        items = await call(runner.pending, request.path_params["thread_id"])
        return JSONResponse([p.model_dump(mode="json") for p in items])

    async def event_list(request: Request) -> Response:
        since = int_param(request, "since", 0, low=0)
        limit = int_param(request, "limit", 1000, low=1, high=10000)
        kinds = [k for v in request.query_params.getlist("kind") for k in v.split(",") if k]
        found = await call(
            runner.events,
            request.path_params["thread_id"],
            since=since,
            kinds=kinds or None,
            limit=limit,
        )
        return JSONResponse([e.to_json() for e in found])

    async def event_stream(request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        header = request.headers.get("last-event-id")
        # The header wins: a browser reconnecting keeps the first URL (and its ?since=).
        since = int_value(header, "Last-Event-ID") if header else int_param(request, "since", 0)
        await call(runner.status, thread_id)  # 404 now rather than a stream that ends at once
        return StreamingResponse(
            events.stream(thread_id, since),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def artifacts(request: Request) -> Response:
        fn = getattr(runner, "artifacts", None)
        if fn is None:
            return error(501, "this version of longtask has no artifact store")
        found = await call(fn, request.path_params["thread_id"])
        return JSONResponse([jsonable(a) for a in found])

    async def artifact(request: Request) -> Response:
        fn = getattr(runner, "artifact", None)
        if fn is None:
            return error(501, "this version of longtask has no artifact store")
        name = request.path_params["name"]
        try:
            found = await call(fn, request.path_params["thread_id"], name)
        except InvalidInput as exc:  # no such artifact (or a name that cannot be one)
            return error(404, str(exc))
        if found is None:
            return error(404, f"no artifact {name!r}")
        return artifact_response(name, found)

    # -- actions -------------------------------------------------------------------------

    def answer_later(
        answering: Answering, target: str | None, kind: str, value: Any, by: str
    ) -> str | None:
        """Check an answer now, and record it as a run that serve's executor carries out:
        the request returns at once, however long the steps after the pause take. Whether
        the caller may answer the pause it names is asked first (``answering``)."""
        thread_id = answering.thread_id
        rec = runner.reads.thread(thread_id)
        if runner.served_by_workers(rec):
            entry = tasks.find(rec.task_name)
            task = entry.for_thread(rec) if entry is not None else runner.engine.load(rec)
            answering.check([runner.pauses.select(thread_id, task, target, kind)])
            # Queued for the workers: returns as soon as the command is in the inbox.
            if kind == "approval":
                runner.decide(thread_id, target, by=by, **value)
            elif kind in ("interrupt", "effect"):
                runner.answer(thread_id, value, interrupt=target, by=by)
            else:
                runner.signal(thread_id, str(target), value, by=by)
            return None  # no run of serve's: a worker carries it out
        entry = tasks.find(rec.task_name)
        task = entry.for_thread(rec) if entry is not None else runner.engine.load(rec)
        seen = lg_runs.refuse_busy(lg, thread_id)
        rec = runner.reads.thread(thread_id)  # read after the mark: what the check sees is current
        request = plan_answer(runner, rec, task, target, kind, value, by, answering)
        run = lg_runs.record(lg, thread_id, assistant_id(rec.task_name), request, by, seen=seen)
        return run.run_id

    async def accepted(thread_id: str, run_id: str | None) -> Response:
        status = await call(runner.status, thread_id)
        return JSONResponse({**status.model_dump(mode="json"), "run_id": run_id}, 202)

    async def decide(request: Request, by: str, approved: bool) -> Response:
        thread_id = request.path_params["thread_id"]
        answer = await body(request, DecisionBody)
        value = {"approved": approved, "comment": answer.comment, "plan_hash": answer.plan_hash}
        answering = access.answering(request)
        run_id = await call(answer_later, answering, answer.step, "approval", value, by)
        return await accepted(thread_id, run_id)

    async def approve(request: Request, by: str) -> Response:
        return await decide(request, by, True)

    async def reject(request: Request, by: str) -> Response:
        return await decide(request, by, False)

    async def signal(request: Request, by: str) -> Response:
        thread_id = request.path_params["thread_id"]
        event = await body(request, SignalBody)
        answering = access.answering(request)
        run_id = await call(answer_later, answering, event.name, "wait", event.payload, by)
        return await accepted(thread_id, run_id)

    async def answer(request: Request, by: str) -> Response:
        thread_id = request.path_params["thread_id"]
        given = await body(request, AnswerBody)
        answering = access.answering(request)
        run_id = await call(answer_later, answering, given.interrupt, "interrupt", given.value, by)
        return await accepted(thread_id, run_id)

    async def resolve(request: Request, by: str) -> Response:
        thread_id = request.path_params["thread_id"]
        given = await body(request, ResolveBody)
        if given.result is not None and given.outcome != "succeeded":
            raise HTTPException(400, 'a result goes with the outcome "succeeded"')
        if given.reason is not None and given.outcome != "failed":
            raise HTTPException(400, 'a reason goes with the outcome "failed"')
        # longtask's own answer to the effect's pause: checked and carried out as any other
        # answer to it (the Server API's, Agent Inbox's), by the same rule of who may
        value: dict[str, Any] = {"key": given.key}
        value[given.outcome] = {
            "succeeded": given.result,
            "failed": given.reason or True,
            "retry": True,
        }[given.outcome]
        answering = access.answering(request)
        run_id = await call(answer_later, answering, given.key, "effect", value, by)
        return await accepted(thread_id, run_id)

    def cancel_later(thread_id: str, reason: str | None, by: str) -> str | None:
        """Refuse a cancel that comes too late now; record the rest as a run: compensations
        run in serve's executor, never inside the request."""
        rec = runner.reads.thread(thread_id)
        if rec.status in ("completed", "cancelled") or (rec.error or {}).get("compensated"):
            raise TooLateToCancel(thread_id, rec.status)
        if runner.served_by_workers(rec):
            runner.cancel(thread_id, reason=reason, by=by)  # queued for the workers
            return None  # no run of serve's: a worker carries it out
        request = {"kind": "cancel", "reason": reason}
        return lg_runs.record(lg, thread_id, assistant_id(rec.task_name), request, by).run_id

    async def cancel(request: Request, by: str) -> Response:
        thread_id = request.path_params["thread_id"]
        order = await body(request, CancelBody)
        run_id = await call(cancel_later, thread_id, order.reason, by)
        return await accepted(thread_id, run_id)

    async def retry(request: Request, by: str) -> Response:
        thread_id = request.path_params["thread_id"]
        order = await body(request, RetryBody)
        run_id = await call(retry_later, lg, thread_id, order.step, by)
        return await accepted(thread_id, run_id)

    async def skip(request: Request, by: str) -> Response:
        thread_id = request.path_params["thread_id"]
        order = await body(request, SkipBody)
        run_id = await call(skip_later, lg, thread_id, order.step, order.result, by)
        return await accepted(thread_id, run_id)

    async def results(request: Request) -> Response:
        every = request.query_params.get("all") in ("1", "true")
        found = await call(final_results, lg, request.path_params["thread_id"], every)
        return JSONResponse(found)

    unserved = lg_unserved.routes()

    async def openapi(request: Request) -> Response:
        """This server's routes, as an OpenAPI 3.1 document"""
        return JSONResponse(described)

    async def info(request: Request) -> Response:
        from importlib.metadata import PackageNotFoundError, version

        try:
            langgraph = version("langgraph")
        except PackageNotFoundError:  # pragma: no cover - langgraph is a dependency
            langgraph = "unknown"
        return JSONResponse(
            {
                "version": __version__,
                "langgraph_py_version": langgraph,
                "flags": {"assistants": True, "crons": False, "langsmith": False},
                "metadata": {"server": "longtask"},
            }
        )

    async def ok(request: Request) -> Response:
        return JSONResponse({"ok": True})

    # /ready and /ok need no token (a load balancer calls them): they name the parts that
    # are not ready and nothing about threads. /metrics is read like the API's reads.
    readiness = Readiness(runner.db, timeout=ready_timeout)
    gauges = metrics_registry(runner.db)

    async def ready(request: Request) -> Response:
        is_ready, checks = await call(readiness.check)
        return JSONResponse({"ready": is_ready, "checks": checks}, 200 if is_ready else 503)

    async def metrics(request: Request) -> Response:
        text = await call(exposition, gauges)
        return Response(text, media_type=CONTENT_TYPE)

    # -- pages ---------------------------------------------------------------------------

    async def home(request: Request) -> Response:
        return page_response(index_page(reads_need_token=not open_reads, db_option=hints.db_option))

    async def thread_view(request: Request) -> Response:
        if "text/html" not in request.headers.get("accept", ""):
            # Not a browser: the LangGraph Server API's thread (the SDK's threads.get).
            if http.off("threads"):
                return error(404, "Not Found")
            return await lg_thread(request)
        thread_id = request.path_params["thread_id"]
        # Only where anyone may read: with closed reads, whether a thread exists is the
        # API's answer to a token, and the page asks it.
        if open_reads and await call(runner.db.store.get_thread, thread_id) is None:
            return page_response(
                thread_page(thread_id, False, missing=True, db_option=hints.db_option), 404
            )
        return page_response(thread_page(thread_id, not open_reads, db_option=hints.db_option))

    async def favicon(request: Request) -> Response:
        return Response(FAVICON, media_type="image/svg+xml")

    executor = Executor(
        runner, tasks, workers=run_workers, to_workers=to_workers, webhooks=webhooks
    )
    lg = Api(runner, tasks, executor, reader, actor, access, webhooks_off=http.off("webhooks"))
    lg.cancel = cancel_later
    lg_thread_routes, lg_thread_get = lg_threads.routes(lg)
    lg_thread = reader(lg_thread_get)
    lg_run_routes = lg_runs.routes(lg)
    mcp = McpEndpoint(lg)
    a2a = A2aEndpoint(lg)
    kv = StoreRoutes(lg)

    schedules = (
        ScheduleLoop(executor, tasks, poll=schedule_poll, to_workers=to_workers)
        if schedule_poll is not None
        else None
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        recovered = await call(executor.recover)
        if recovered:
            log.info("continuing %d thread(s) left unfinished", len(recovered))
        if schedules is not None:
            schedules.start()
        # With the app, not before: webhooks owed by a serve that stopped go out now.
        executor.webhooks.start()
        # notices the runs' events owe (and reminders), told with the registry's tasks
        runner.notifier.load = executor.task_for
        runner.notifier.start()
        try:
            async with contextlib.AsyncExitStack() as stack:
                if http.app is not None:
                    # the app's own startup and shutdown, as it would run alone
                    await stack.enter_async_context(http.app.router.lifespan_context(http.app))
                await stack.enter_async_context(mcp.running())
                yield
        finally:
            if schedules is not None:
                schedules.close()
            executor.close()
            await call(kv.close)

    api = "/api/threads/{thread_id}"
    meta_on = not http.off("meta")
    # ahead of the app's own routes (LangGraph's server's unshadowable ones)
    first = [
        Route("/ok", public(ok)),
        Route("/ready", public(ready)),
        *(
            [
                # counts over every thread: for the roles that see every thread
                Route("/metrics", everything(metrics)),
                Route("/openapi.json", public(openapi)),
            ]
            if meta_on
            else []
        ),
    ]
    groups = {
        "assistants": lg_assistants.routes(lg),
        "threads": [*lg_threadops.routes(lg), *lg_thread_routes],
        # crons before the runs': /threads/{thread_id}/runs/crons is not a run's id
        "runs": [*lg_crons.routes(lg), *lg_run_routes, *lg_runops.routes(lg)],
        "mcp": [
            Route("/mcp", signed_in(mcp.handle), methods=["POST"]),
            Route("/mcp/", signed_in(mcp.handle), methods=["POST"]),  # LangGraph's spec's path
        ],
        "a2a": a2a.routes(),
        "store": kv.routes(),
    }
    served = [r for group, rs in groups.items() if not http.off(group) for r in rs]
    routes = [
        Route("/", public(home)),
        Route("/threads/{thread_id}", page(thread_view), methods=["GET"]),
        Route("/favicon.ico", public(favicon)),
        *served,
        *([Route("/info", public(info))] if meta_on else []),
        Route("/api/threads", reader(list_threads)),
        Route("/api/schedules", reader(schedules_route(runner))),
        Route(api, reader(thread_status)),
        Route(api + "/pending", reader(pending)),
        Route(api + "/report", reader(report)),
        Route(api + "/results", reader(results)),
        Route(api + "/events", reader(event_list)),
        Route(api + "/events/stream", reader(event_stream)),
        Route(api + "/artifacts", reader(artifacts)),
        Route(api + "/artifacts/{name:path}", reader(artifact)),
        Route(api + "/approve", answerer(approve), methods=["POST"]),
        Route(api + "/reject", answerer(reject), methods=["POST"]),
        Route(api + "/signal", answerer(signal), methods=["POST"]),
        Route(api + "/answer", answerer(answer), methods=["POST"]),
        Route(api + "/resolve", answerer(resolve), methods=["POST"]),
        Route(api + "/cancel", actor(cancel), methods=["POST"]),
        Route(api + "/retry", actor(retry), methods=["POST"]),
        Route(api + "/skip", actor(skip), methods=["POST"]),
        # last: a path or method above is never answered as unserved
        *unserved,
    ]
    # One gate in front of every route (serve.access); a route without a rule is refused.
    guarded_first, uncovered = access.protect(first)
    guarded_rest, uncovered_rest = access.protect(routes)
    uncovered += uncovered_rest
    for where in uncovered:
        log.error("route %s declares no authorization rule: every request to it is refused", where)
    own, refused, shadowed = app_routes(http, access)
    for where in refused:
        log.error("the app's route %s declares no authorization rule: refused", where)
    guarded = [*guarded_first, *own, *guarded_rest]
    listed = [*first, *described_app(own), *routes[: len(routes) - len(unserved)]]
    described = describe(r for r in listed if isinstance(r, Route))
    cors = cors_middleware(cors_origins, http.cors)
    middleware = [cors] if cors is not None else []
    if loopback_hosts_only:
        middleware.append(Middleware(LoopbackHostOnly))
    middleware.append(Middleware(NoNulBytes, routes=guarded))
    middleware.append(Middleware(BodyLimit, limit=max_body))
    app = Starlette(
        routes=guarded,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={
            LongTaskError: on_longtask_error,
            HTTPException: on_http_error,
            Exception: on_internal_error,
        },
    )
    # The error handlers make the commands they print name this database (see _hints).
    app.state.hints = hints
    app.state.max_body = max_body
    app.state.uncovered = uncovered
    #: the app's routes refused for want of a rule, and the ones the API keeps
    app.state.app_refused = refused
    app.state.app_shadowed = shadowed
    app.state.access = access
    return app
