"""The rules routes declare, and who calls: each route of ``longtask serve`` says who may
call it where it is defined (``reader``, ``answerer``, ``actor``, ``copier``,
``everything``, ``public``, ``page``, ``signed_in``; ``about`` for a resource other than
threads); the gate (``_decision.Access``) reads the rule and decides."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

Handler = Callable[[Request], Awaitable[Response]]
ActorHandler = Callable[[Request, str], Awaitable[Response]]

#: the attributes a route's endpoint carries its rule and its resource in
_RULE = "__longtask_rule__"
_RESOURCE = "__longtask_resource__"
#: the permission an auth handler's ``authenticate`` gives a user who may read ``/metrics``
METRICS_PERMISSION = "metrics:read"
#: the resource a route is about unless it says otherwise (``about``)
THREADS = "threads"


class Rule(Enum):
    #: anyone, no token: health checks, the page's shell (it holds no thread's data)
    PUBLIC = "public"
    #: the HTML page for a browser (public), else the thread's JSON (READ)
    PAGE = "page"
    #: any caller who is signed in: what is the same for everyone (assistants, info)
    SIGNED_IN = "signed in"
    #: see: the thread the path names, or a list the handler filters to what one may see
    READ = "read"
    #: answer a pause of the thread the path names
    ANSWER = "answer"
    #: act on the thread the path names, or create one
    ACT = "act"
    #: read the thread the path names in one's own right (not as an approver its pause
    #: names) and create a thread from it: a copy
    COPY = "copy"
    #: what spans every thread (metrics): roles that see everything
    EVERYTHING = "everything"


_LEVEL = {"none": 0, "read": 1, "answer": 2, "act": 3}
_NEEDS = {
    Rule.READ: "read",
    Rule.ANSWER: "answer",
    Rule.ACT: "act",
    Rule.PAGE: "read",
    Rule.COPY: "read",
}
#: the rules of routes that write (a caller must be named, and no viewer)
_ACTING = (Rule.ACT, Rule.ANSWER, Rule.COPY)


@dataclass(frozen=True)
class Caller:
    """Who makes a request. ``name`` is None in open mode without a token (anyone on this
    machine: reads everything, acts on nothing)."""

    name: str | None
    role: str
    #: what an auth handler's ``authenticate`` returned, as LangGraph's handlers see it
    user: Any = None
    permissions: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def sees_everything(self) -> bool:
        return self.role in ("admin", "viewer", "open")


@dataclass(frozen=True)
class ListScope:
    """Which threads a list shows (``Access.scope``): the store's ``visible_to`` name and
    ``metadata`` filter, and a test of each thread left to Python (None: none)."""

    name: str | None
    metadata: dict[str, str] | None
    passes: Callable[[str], bool] | None


def _declare(rule: Rule) -> Callable[[Handler], Handler]:
    def mark(handler: Handler) -> Handler:
        if inspect.ismethod(handler):
            # A bound method takes no attribute: the rule goes on a function calling it.
            bound = handler

            async def handler(request: Request) -> Response:
                answer: Response = await bound(request)
                return answer

        setattr(handler, _RULE, rule)
        return handler

    return mark


def caller_of(request: Request) -> Caller:
    """The caller the gate identified (every protected route has one)."""
    found = getattr(request.state, "caller", None)
    assert isinstance(found, Caller), "a route reached without the gate"
    return found


def by_of(request: Request) -> str:
    """Who acts: the caller's name (the gate lets no anonymous caller act)."""
    name = caller_of(request).name
    assert name is not None, "an action reached without a name"
    return name


def public(handler: Handler) -> Handler:
    return _declare(Rule.PUBLIC)(handler)


def page(handler: Handler) -> Handler:
    return _declare(Rule.PAGE)(handler)


def signed_in(handler: Handler) -> Handler:
    return _declare(Rule.SIGNED_IN)(handler)


def reader(handler: Handler) -> Handler:
    return _declare(Rule.READ)(handler)


def everything(handler: Handler) -> Handler:
    return _declare(Rule.EVERYTHING)(handler)


def _with_by(rule: Rule, handler: ActorHandler) -> Handler:
    async def endpoint(request: Request) -> Response:
        return await handler(request, by_of(request))

    return _declare(rule)(endpoint)


def actor(handler: ActorHandler) -> Handler:
    """A route that acts (on the thread its path names, or creates one); the handler gets
    who acts."""
    return _with_by(Rule.ACT, handler)


def answerer(handler: ActorHandler) -> Handler:
    """A route that answers a pause of the thread its path names."""
    return _with_by(Rule.ANSWER, handler)


def copier(handler: ActorHandler) -> Handler:
    """A route that reads the thread its path names and creates a thread from it; the
    handler gets who acts (the new thread's owner)."""
    return _with_by(Rule.COPY, handler)


def about(resource: str, handler: Handler) -> Handler:
    """Mark a route (already given its rule) as about ``resource`` (``assistants``,
    ``crons``, ``store``), not threads. With LangGraph's auth handlers the gate then
    identifies the caller and leaves the decision to the route, which asks its resource's
    handlers with the values only it knows (``Access.ask``), as LangGraph's server does.
    Without handlers the rule applies as for threads' lists: a viewer only reads."""
    setattr(handler, _RESOURCE, resource)
    return handler


def resource_of(endpoint: Any) -> str:
    found = getattr(endpoint, _RESOURCE, THREADS)
    return found if isinstance(found, str) else THREADS


def rule_of(route: BaseRoute) -> Rule | None:
    endpoint = getattr(route, "endpoint", None)
    found = getattr(endpoint, _RULE, None)
    return found if isinstance(found, Rule) else None


def describe(route: BaseRoute) -> str:
    methods = sorted(getattr(route, "methods", None) or [])
    return f"{','.join(methods) or '*'} {getattr(route, 'path', route)!r}"
