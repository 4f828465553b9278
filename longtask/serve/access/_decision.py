"""Who may see and do what in ``longtask serve``: one gate in front of every route.

Each route declares its rule where it is defined (``reader``, ``answerer``, ``actor``,
``copier``, ``everything``, ``public``, ``page``, ``signed_in``); ``Access.protect`` wraps
every route of the app in the one check below, and a route that declares none is refused
(403) and listed in ``uncovered`` (``serve`` prints them at start; a test asserts there
are none).

The check, in order: who calls (a bearer token, or an auth handler's ``authenticate``;
401 if neither says), whether the caller may see the thread the path names (404 if not,
as LangGraph's server answers), whether the caller may do what the route does (403), and
only then the route. A refused request reaches no handler, so it writes nothing.

Levels on a thread, lowest first: ``read`` (see it), ``answer`` (answer the approvals
that name the caller), ``act`` (everything else: runs, cancel, retry, skip, state,
metadata, delete, and answering any pause). The owner and ``admin`` act; a ``viewer``
reads every thread; a person a pending approval names as an approver answers that
approval, and reads the thread while it waits for them and, once they answered one of its
approvals, afterwards (``longtask_answerers``). A thread stored before owners were
recorded has none: admins and viewers see it. In open mode (no token, no auth handler:
only on loopback) anyone reads everything and nobody acts.

An answer is allowed per pause (``may_answer``): the gate lets an approver through to an
answer door, and the door, once it knows which pending pause it answers (an approval, a
wait, a graph interrupt, ...), asks ``Answering.check`` about that pause. The owner and
an admin (or, with auth handlers, a caller the threads handler's filter lets act) answer
every pause; an approver only the approvals that name them.

Lists, searches and counts choose what the caller sees in the database query
(``shown_to``, ``scope``: the store's ``visible_to``), so that a page's ``limit``/``offset``
count the caller's threads only; an auth handler's metadata filter is matched in the query
when it is plain (``{"owner": "alice"}``), else in Python (``handler_filter``).
``/metrics`` (``everything``) is for the roles that see every thread; with an auth handler
also for a built-in admin/viewer token and a user given ``metrics:read``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from longtask.errors import InvalidInput
from longtask.runtime._who import check_by
from longtask.serve._http import error, unauthorized
from longtask.serve.access._handlers import HandlerRefused, matches
from longtask.serve.access._rules import (
    _ACTING,
    _LEVEL,
    _NEEDS,
    _RULE,
    METRICS_PERMISSION,
    THREADS,
    Caller,
    Handler,
    ListScope,
    Rule,
    caller_of,
    describe,
    resource_of,
    rule_of,
)
from longtask.store._visible import simple_filter

if TYPE_CHECKING:
    from longtask._runner import Runner
    from longtask.runtime._views import Pending
    from longtask.serve.access._handlers import Handlers
    from longtask.serve.access._tokens import Tokens


#: the routes that start a run on the thread their path names: with a body that only
#: answers (``command.resume``), an answer door (``Access.check``)
_RUN_PATHS = ("/runs", "/runs/wait", "/runs/stream")
#: what a run that only answers may say besides its ``command``: nothing that acts (no
#: input, config, checkpoint, webhook or multitask strategy)
_ANSWER_RUN_KEYS = frozenset(
    {"assistant_id", "command", "stream_mode", "stream_subgraphs", "stream_resumable"}
)
#: how a refusal names a pause of each kind
_PAUSE_WORDS = {
    "approval": "approval",
    "wait": "outside event",
    "interrupt": "graph interrupt",
    "effect": "effect to settle",
    "subtask": "sub-tasks",
}


@dataclass(frozen=True)
class Answering:
    """Who answers pauses of one thread, and their level on it as the gate (a thread in
    the path) or ``Access.level_for`` (a thread in the body) found it: the door that
    resolves which pause an answer is for asks ``check`` before it checks the answer."""

    name: str | None
    thread_id: str
    #: ``act``, ``answer``, ``read``, ``none``; None: the thread did not exist
    level: str | None

    def check(self, pauses: Iterable[Pending]) -> None:
        """Nothing if the caller may answer each of ``pauses``; else raises the refusal
        (HTTPException: 403, or 404 for a thread they may not see)."""
        for pause in pauses:
            refused = may_answer(self, pause)
            if refused is not None:
                raise HTTPException(*refused)

    @property
    def limited(self) -> bool:
        """Whether some pauses of the thread are not the caller's to answer."""
        return self.level != "act"


def may_answer(who: Answering, pause: Pending) -> tuple[int, str] | None:
    """The one rule for answers: None if ``who`` may answer ``pause`` of their thread, else
    the status and message to refuse with. The owner and an admin (level ``act``) answer
    any pause; a person an approval names as an approver answers that approval, nothing
    else; nobody else answers."""
    if who.level in (None, "none"):
        return 404, f"no thread {who.thread_id!r}"
    if who.level == "act":
        return None
    approvers = pause.request.get("approvers") or ()
    if (
        who.level == "answer"
        and who.name is not None
        and pause.kind == "approval"
        and who.name in approvers
    ):
        return None
    what = f"{_PAUSE_WORDS.get(pause.kind, pause.kind)} {pause.step!r}"
    if who.level == "answer":
        why = f"{who.name!r} answers only the approvals that name them on thread "
        return 403, f"{why}{who.thread_id!r}: the {what} is for its owner or an admin"
    return 403, f"{who.name!r} may read thread {who.thread_id!r}, not answer its {what}"


class Access:
    """The gate: identifies the caller and applies each route's rule."""

    def __init__(
        self,
        runner: Runner,
        tokens: Tokens,
        roles: dict[str, str] | None = None,
        handlers: Handlers | None = None,
    ) -> None:
        self.runner = runner
        self.tokens = tokens
        self.roles = dict(roles or {})
        #: LangGraph's auth handlers (langgraph.json ``auth``): they identify every caller
        self.handlers = handlers
        #: open mode: no token and no handler configured (serve allows it on loopback only)
        self.open = not tokens and handlers is None

    # -- who calls ---------------------------------------------------------------------------

    async def identify(self, request: Request) -> Caller | Response:
        """The caller, or the 401 to answer."""
        if self.open:
            return Caller(None, "open")
        if self.handlers is not None:
            return await self._from_handler(request)
        name = self.tokens.from_request(request, query=request.method in ("GET", "HEAD"))
        if name is None:
            given = (
                "authorization" in request.headers
                or "x-api-key" in request.headers
                or "access_token" in request.query_params
            )
            return unauthorized("invalid bearer token" if given else "a bearer token is needed")
        return Caller(name, self.roles.get(name, "user"))

    async def _from_handler(self, request: Request) -> Caller | Response:
        assert self.handlers is not None
        try:
            identity, user, permissions = await self.handlers.authenticate(request)
            name = check_by(identity)  # it is who acts: one line of printable text
        except HandlerRefused as exc:
            if exc.status == 401:
                return unauthorized(exc.detail)
            return error(exc.status, exc.detail)
        except InvalidInput as exc:
            return error(401, f"the auth handler's identity cannot name who acts: {exc}")
        return Caller(name, self.roles.get(name, "user"), user, tuple(permissions))

    async def _handler_filter(
        self, caller: Caller, action: str, value: dict[str, Any]
    ) -> dict[str, Any] | Response | None:
        """The filter the threads handler for ``action`` returns, or its refusal."""
        assert self.handlers is not None
        try:
            return await self.handlers.on(
                caller.user, list(caller.permissions), "threads", action, value
            )
        except HandlerRefused as exc:
            return error(exc.status, exc.detail)

    def metadata_of(self, thread_id: str) -> dict[str, Any]:
        found = self.runner.db.store.api_thread(thread_id)
        return dict(found[0]) if found else {}

    # -- what the caller may do with a thread ---------------------------------------------------

    def level(self, caller: Caller, thread_id: str) -> str | None:
        """``none``/``read``/``answer``/``act`` on the thread, None if it does not exist."""
        exists, owner = self.runner.db.store.thread_owner(thread_id)
        if not exists:
            return None
        if caller.role == "admin":
            return "act"
        if caller.name is not None and owner == caller.name and caller.role == "user":
            return "act"
        if caller.sees_everything:
            return "read"
        if caller.name is not None and self.named_by_pause(caller.name, thread_id):
            return "answer"
        if caller.name is not None and self.runner.db.store.answered(thread_id, caller.name):
            return "read"
        return "none"

    def answering(self, request: Request) -> Answering:
        """What the caller of a route whose path names a thread may answer of it, by the
        level the gate found (none recorded: the thread did not exist then)."""
        caller = caller_of(request)
        thread_id = str(request.path_params["thread_id"])
        return Answering(caller.name, thread_id, getattr(request.state, "level", None))

    async def sees(self, caller: Caller, thread_id: str) -> bool | None:
        """Whether ``caller`` may see the thread (as a read of it would be decided); None:
        no such thread. For a door that names a thread in its body."""
        level = await self.level_for(caller, thread_id, "read")
        return None if level is None else level != "none"

    def acts_on(self, caller: Caller, thread_id: str) -> bool | None:
        """Whether ``caller`` may act on the thread (an auth handler's filter, given to the
        route by the gate, decides when there is one); None if they may not see it, or it
        does not exist."""
        if "filter" in caller.extra:
            if not self.runner.db.store.thread_owner(thread_id)[0]:
                return None
            return True if matches(self.metadata_of(thread_id), caller.extra["filter"]) else None
        level = self.level(caller, thread_id)
        if level in (None, "none"):
            return None
        return level == "act"

    def named_by_pause(self, name: str, thread_id: str) -> bool:
        """Whether a pending approval of the thread names ``name`` among its approvers."""
        rec = self.runner.db.store.get_thread(thread_id)
        if rec is None or rec.status != "waiting_user":
            return False
        for pending in self.runner.pending(thread_id):
            approvers = pending.request.get("approvers") or ()
            if name in approvers:
                return True
        return False

    async def level_for(self, caller: Caller, thread_id: str, needed: str) -> str | None:
        """The caller's level on the thread as the gate decides it, for doors that name a
        thread inside the body (MCP's tools, A2A's tasks): ``level`` with built-in tokens;
        with LangGraph's auth handlers, the threads handler for what ``needed`` stands
        for (``read``, else ``create_run``), its filter matched against the thread's
        metadata, an approver named by a pending approval answering. None: no such thread.
        HTTPException when the handler refuses."""
        if self.handlers is None or caller.role != "user":
            return await run_in_threadpool(self.level, caller, thread_id)
        exists, _ = await run_in_threadpool(self.runner.db.store.thread_owner, thread_id)
        if not exists:
            return None
        action = "read" if needed == "read" else "create_run"
        found = await self._handler_filter(caller, action, {"thread_id": thread_id})
        if isinstance(found, Response):
            raise HTTPException(found.status_code, bytes(found.body).decode(errors="replace"))
        return await self._handler_level(caller, thread_id, found)

    async def _handler_level(
        self, caller: Caller, thread_id: str, found: dict[str, Any] | None
    ) -> str:
        """The caller's level on a thread that exists, by the filter its threads handler
        returned: ``act`` if the thread's metadata matches it, else ``answer`` if a pending
        approval names the caller, else ``none``. The one decision the gate (a thread in
        the path) and ``level_for`` (a thread in the body) share."""
        metadata = await run_in_threadpool(self.metadata_of, thread_id)
        if matches(metadata, found):
            return "act"
        if caller.name is not None:
            named = await run_in_threadpool(self.named_by_pause, caller.name, thread_id)
            if named:
                return "answer"
            store = self.runner.db.store
            if await run_in_threadpool(store.answered, thread_id, caller.name):
                return "read"
        return "none"

    async def run_metadata(
        self, caller: Caller, thread_id: str | None, assistant_id: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        """For a door that starts runs from inside its body (MCP, A2A): the run's metadata
        as the threads handler's ``create_run`` leaves it (None: no handler decides), as the
        gate does for ``POST /runs``. HTTPException when the handler refuses."""
        if self.handlers is None or caller.role != "user":
            return None
        value = _run_value(thread_id, {**body, "assistant_id": assistant_id})
        found = await self._handler_filter(caller, "create_run", value)
        if isinstance(found, Response):
            raise HTTPException(found.status_code, bytes(found.body).decode(errors="replace"))
        metadata = value.get("metadata")
        return metadata if isinstance(metadata, dict) else None

    async def list_scope(self, caller: Caller) -> ListScope:
        """``scope`` for a door whose lists are not a route of their own (MCP's ``threads``
        tool): with LangGraph's auth handlers, the threads handler's ``search`` is asked
        first, as for ``threads.search``."""
        if self.handlers is not None and caller.role == "user" and "filter" not in caller.extra:
            value = _search_value({})
            found = await self._handler_filter(caller, "search", value)
            if isinstance(found, Response):
                raise HTTPException(found.status_code, bytes(found.body).decode(errors="replace"))
            found = _with_search_metadata(found, {}, value["metadata"])
            caller = Caller(
                caller.name, caller.role, caller.user, caller.permissions, {"filter": found}
            )
        return self.scope(caller)

    def shown_to(self, caller: Caller) -> str | None:
        """Whose threads a list, search or count shows, for the store's query
        (``visible_to``): the caller's name, or None for every thread (a role that sees
        everything; or, with an auth handler, what ``handler_filter`` then passes)."""
        if caller.sees_everything or "filter" in caller.extra:
            return None
        assert caller.name is not None, "a list reached without a name"
        return caller.name

    def scope(self, caller: Caller) -> ListScope:
        """What a search or count shows the caller, for the store's query: the caller's
        threads, or with an auth handler the threads its filter matches (in the query
        when it is plain, ``simple_filter``; else in Python, ``passes``)."""
        wanted = caller.extra.get("filter")
        simple = simple_filter(wanted) if wanted else None
        if simple is not None:
            return ListScope(caller.name, simple, None)
        return ListScope(self.shown_to(caller), None, self.handler_filter(caller))

    def handler_filter(self, caller: Caller) -> Callable[[str], bool] | None:
        """An auth handler's search filter on the threads' metadata as a test of a thread
        (a thread whose pending approval names the caller passes too); None when there is
        none to apply."""
        wanted = caller.extra.get("filter")
        if not wanted:
            return None

        def passes(thread_id: str) -> bool:
            if matches(self.metadata_of(thread_id), wanted):
                return True
            if caller.name is None:
                return False
            return self.named_by_pause(caller.name, thread_id) or self.runner.db.store.answered(
                thread_id, caller.name
            )

        return passes

    # -- the gate ----------------------------------------------------------------------------

    async def ask(
        self, request: Request, resource: str, action: str, value: dict[str, Any]
    ) -> dict[str, Any] | None:
        """What the auth handler for ``resource``/``action`` decides about ``value`` (it may
        change ``value`` in place, as on LangGraph's server): the filter it returns, None
        when no handler decides (built-in tokens, an admin or viewer, or no handler for
        it); HTTPException with the handler's status when it refuses."""
        caller = caller_of(request)
        if self.handlers is None or caller.role != "user":
            return None
        try:
            return await self.handlers.on(
                caller.user, list(caller.permissions), resource, action, value
            )
        except HandlerRefused as exc:
            raise HTTPException(exc.status, exc.detail) from None

    async def check(self, rule: Rule, request: Request, resource: str = THREADS) -> Response | None:
        """None if the request may go on (``request.state.caller`` set), else the answer."""
        if rule is Rule.PUBLIC or (
            rule is Rule.PAGE and "text/html" in request.headers.get("accept", "")
        ):
            request.state.caller = Caller(None, "open" if self.open else "anonymous")
            return None
        if rule is Rule.EVERYTHING:
            return await self._check_everything(request)
        found = await self.identify(request)
        if isinstance(found, Response):
            return found
        caller = found
        request.state.caller = caller
        if rule is Rule.ACT and await _answers_only(request):
            # A run that only resumes the thread's pauses is an answer: an approver may send
            # it, and the route asks about each pause it answers (``Answering.check``).
            rule = Rule.ANSWER
        acting = rule in _ACTING
        if acting and caller.name is None:
            return unauthorized("a bearer token is needed")
        if rule is Rule.COPY and caller.role == "viewer":
            return error(403, f"{caller.name!r} is a viewer: reads only, creates no thread")
        thread_id = request.path_params.get("thread_id")
        needed = _NEEDS.get(rule)
        if needed is None:  # SIGNED_IN
            return None
        if self.handlers is not None and caller.role == "user":
            if resource != THREADS:
                # A resource of its own (store, assistants, crons): its route asks its
                # handlers (``Access.ask``) with the values only it knows.
                return None
            return await self._check_by_handler(rule, request, caller, thread_id)
        if thread_id is None:
            # A list (filtered by its handler) or a new thread.
            if acting and caller.role == "viewer":
                return error(403, f"{caller.name!r} is a viewer: reads only")
            return None
        level = await run_in_threadpool(self.level, caller, str(thread_id))
        request.state.level = level
        if level is None:
            # No such thread: the route answers (a 404, or a thread it creates).
            if acting and caller.role == "viewer":
                return error(403, f"{caller.name!r} is a viewer: reads only")
            return None
        if level == "none":
            return error(404, f"no thread {thread_id!r}")
        if rule is Rule.COPY and level in ("answer", "read"):
            # An approver reads the thread while its pause waits for them, for the answer,
            # and after it: not in their own right, so not into a thread of their own.
            return error(
                403, f"{caller.name!r} may answer the pause of thread {thread_id!r}, not copy it"
            )
        if _LEVEL[level] < _LEVEL[needed]:
            what = "a viewer: reads only" if caller.role == "viewer" else f"not allowed to {needed}"
            return error(403, f"{caller.name!r} is {what} on thread {thread_id!r}")
        return None

    async def _check_everything(self, request: Request) -> Response | None:
        """What spans every thread (``/metrics``): a role that sees every thread; with an
        auth handler, also a built-in ``admin``/``viewer`` token (a Prometheus scrape
        token the handler need not know) and a user the handler gives ``metrics:read``."""
        if self.handlers is not None and self.tokens:
            name = self.tokens.from_request(request)
            if name is not None and self.roles.get(name) in ("admin", "viewer"):
                request.state.caller = Caller(name, self.roles[name])
                return None
        found = await self.identify(request)
        if isinstance(found, Response):
            return found
        request.state.caller = found
        if found.sees_everything or (
            self.handlers is not None and METRICS_PERMISSION in found.permissions
        ):
            return None
        needs = "the role admin or viewer"
        if self.handlers is not None:
            needs += f", or the permission {METRICS_PERMISSION!r} from the auth handler"
        return error(403, f"{found.name!r} may not read what spans every thread: it needs {needs}")

    async def _check_by_handler(
        self, rule: Rule, request: Request, caller: Caller, thread_id: str | None
    ) -> Response | None:
        """The gate when LangGraph's auth handlers decide: the threads handler for what the
        route does, its filter matched against the thread's metadata (LangGraph's 404)."""
        action = _action(rule, request)
        value: dict[str, Any] = {"thread_id": thread_id}
        if thread_id is None and action == "create" and request.url.path == "/threads":
            body = await _json_object(request)
            value = {
                "thread_id": body.get("thread_id"),
                "metadata": dict(body.get("metadata") or {}),
                "if_exists": body.get("if_exists"),
            }
        elif action == "create_run" and request.url.path == "/runs/batch":
            # A batch: its handler is asked about each run, as LangGraph's server asks it
            # for each; one refusal refuses the batch (the route records none of it).
            for item in await _json_items(request):
                refused = await self._handler_filter(caller, action, _run_value(None, item))
                if isinstance(refused, Response):
                    return refused
            return None
        elif action == "create_run":
            value = _run_value(thread_id, await _json_object(request))
        elif thread_id is None and action == "delete":
            # prune: the threads it names, as LangGraph's server asks its handlers
            body = await _json_object(request)
            value = {"thread_ids": body.get("thread_ids"), "strategy": body.get("strategy")}
        elif thread_id is None and action == "update":
            # POST /runs/cancel: the values LangGraph's server gives its handler
            body = await _json_object(request)
            value = {
                "thread_id": body.get("thread_id"),
                "action": request.query_params.get("action", "interrupt"),
                "metadata": {"run_ids": body.get("run_ids"), "status": body.get("status")},
            }
        elif thread_id is None and action == "search":
            body = await _json_object(request) if request.method == "POST" else {}
            value = _search_value(body, count=request.url.path == "/threads/count")
        elif action == "update" and request.method == "PATCH":
            # PATCH /threads/T: the metadata it merges, which the handler may rewrite (the
            # owner-only handler stamps its caller as owner) before it is stored.
            metadata = (await _json_object(request)).get("metadata")
            value["metadata"] = dict(metadata) if isinstance(metadata, dict) else {}
        elif action == "update" and "run_id" in request.path_params:
            # POST /threads/T/runs/R/cancel: LangGraph's server cancels it as one of many.
            value["action"] = request.query_params.get("action", "interrupt")
            value["metadata"] = {"run_ids": [request.path_params["run_id"]], "status": None}
        elif action == "delete" and "run_id" in request.path_params:
            value["run_id"] = request.path_params["run_id"]
        given = dict(value.get("metadata") or {}) if action == "search" else {}
        found = await self._handler_filter(caller, action, value)
        if isinstance(found, Response):
            return found
        if action in ("create_run", "update") and isinstance(value.get("metadata"), dict):
            # The metadata as the handler left it (an owner): a run keeps it, and a thread
            # the run creates is made with it; a PATCH stores it; as on LangGraph's server.
            request.state.handler_metadata = value["metadata"]
        if action == "search":
            found = _with_search_metadata(found, given, value.get("metadata"))
        if thread_id is None:
            if action in ("search", "delete", "update"):
                # A list's filter (search), or the threads a prune or a cancel of many
                # runs may act on.
                request.state.caller = Caller(
                    caller.name, caller.role, caller.user, caller.permissions, {"filter": found}
                )
            elif action == "create" and "metadata" in value:
                # What the handler set (an owner) is stored with the new thread.
                request.state.handler_metadata = value["metadata"]
            return None
        exists = await run_in_threadpool(self.runner.db.store.thread_owner, thread_id)
        if not exists[0]:
            return None  # the route answers 404 (or creates the thread)
        level = await self._handler_level(caller, thread_id, found)
        request.state.level = level
        if level == "act" or (
            level in ("answer", "read")
            and rule is not Rule.COPY
            and _LEVEL[_NEEDS[rule]] <= _LEVEL[level]
        ):
            return None
        return error(404, f"no thread {thread_id!r}")

    def protect(self, routes: Sequence[BaseRoute]) -> tuple[list[BaseRoute], list[str]]:
        """Every route wrapped in the gate; and the routes that declare no rule (refused)."""
        out: list[BaseRoute] = []
        uncovered: list[str] = []
        for route in routes:
            if not isinstance(route, Route):
                uncovered.append(describe(route))
                continue
            rule = rule_of(route)
            if rule is None:
                uncovered.append(describe(route))
            out.append(
                Route(
                    route.path,
                    self._guard(rule, route.endpoint),
                    methods=sorted(route.methods) if route.methods else None,
                    name=route.name,
                )
            )
        return out, uncovered

    def _guard(self, rule: Rule | None, endpoint: Any) -> Handler:
        resource = resource_of(endpoint)

        async def guarded(request: Request) -> Response:
            if rule is None:
                return error(403, "no authorization rule covers this route: refused")
            refused = await self.check(rule, request, resource)
            if refused is not None:
                return refused
            response: Response = await endpoint(request)
            return response

        setattr(guarded, _RULE, rule)
        return guarded


async def _answers_only(request: Request) -> bool:
    """Whether a request is a run of the thread its path names that only answers: a
    ``command`` of ``resume`` alone, and nothing else that acts."""
    if request.method != "POST" or "thread_id" not in request.path_params:
        return False
    if not request.url.path.endswith(_RUN_PATHS):
        return False
    body = await _json_object(request)
    command = body.get("command")
    return (
        isinstance(command, dict)
        and set(command) == {"resume"}
        and command["resume"] is not None
        and set(body) <= _ANSWER_RUN_KEYS
    )


def _action(rule: Rule, request: Request) -> str:
    """The threads action LangGraph's server asks its handlers about for this route."""
    path = request.url.path
    has_thread = "thread_id" in request.path_params
    if rule is Rule.COPY:
        return "read"  # the source; the route asks the create handler for the copy
    if path == "/threads/prune":
        return "delete"
    if path == "/runs/cancel":
        return "update"  # the threads whose runs it cancels, as LangGraph's server asks
    if rule in (Rule.READ, Rule.PAGE):
        return "read" if has_thread else "search"
    if rule is Rule.ANSWER or path.endswith(("/runs", "/runs/stream", "/runs/wait", "/runs/batch")):
        return "create_run"
    if not has_thread:
        return "create"
    if request.method == "DELETE":
        return "delete"
    return "update"


async def _parsed(request: Request, empty: bytes) -> Any:
    """The body parsed for the gate's own look (None when it is no JSON, or nests too deep
    to parse: the route itself answers that, with the 400 that says so). Starlette keeps
    the bytes for the route."""
    import json

    try:
        return json.loads(await request.body() or empty)
    except (ValueError, RecursionError):
        return None


async def _json_object(request: Request) -> dict[str, Any]:
    """The body as an object, for the handler's ``value`` ({} if it is none: the route
    itself answers a malformed body)."""
    data = await _parsed(request, b"{}")
    return data if isinstance(data, dict) else {}


async def _json_items(request: Request) -> list[dict[str, Any]]:
    """The objects of a body that is a JSON array ([] otherwise: the route answers it)."""
    data = await _parsed(request, b"[]")
    return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []


def _search_value(body: dict[str, Any], *, count: bool = False) -> dict[str, Any]:
    """What LangGraph's server gives a threads ``search`` handler: the body's ``metadata``
    and ``values`` ({} when the body has none or null, as the SDKs send), ``status``,
    and the page (10 and 0 when none is given; 0 and 0 for a count)."""

    def mapping(key: str) -> dict[str, Any]:
        found = body.get(key)
        return dict(found) if isinstance(found, dict) else {}

    def number(key: str, default: int) -> Any:
        found = body.get(key)
        return default if count or found is None else found

    return {
        "metadata": mapping("metadata"),
        "values": mapping("values"),
        "status": body.get("status"),
        "limit": number("limit", 0 if count else 10),
        "offset": number("offset", 0),
    }


def _with_search_metadata(
    found: dict[str, Any] | None, given: dict[str, Any], edited: Any
) -> dict[str, Any] | None:
    """A search handler's filter with what it added to the search's ``metadata``: LangGraph's
    server searches with the metadata the handler left, so a key it set (an owner) narrows
    the search even when it returns no filter."""
    if not isinstance(edited, dict):
        return found
    added = {k: v for k, v in edited.items() if k not in given or given[k] != v}
    if not added:
        return found
    # A string is matched in the query (``simple_filter``); another value by equality.
    extra = {k: v if isinstance(v, str) else {"$eq": v} for k, v in added.items()}
    if not found:
        return extra
    if any(k in found and found[k] != extra[k] for k in extra):
        return {"$and": [found, extra]}
    return {**found, **extra}


def _run_value(thread_id: str | None, body: dict[str, Any]) -> dict[str, Any]:
    """What LangGraph's server gives a ``create_run`` handler about a run request."""
    metadata = body.get("metadata")
    return {
        "thread_id": thread_id,
        "assistant_id": body.get("assistant_id"),
        # not an object: the route refuses it (422); the handler sees none
        "metadata": dict(metadata) if isinstance(metadata, dict) else {},
        "kwargs": {k: body.get(k) for k in ("input", "command", "config", "context")},
    }
