"""langgraph.json's ``http`` key: the app's own routes beside the API, the API's groups an
app turns off, and its CORS settings, as LangGraph's server reads them.

- ``app`` (``"./src/agent/webapp.py:app"`` or ``"package.module:app"``): a Starlette or
  FastAPI app whose routes are served beside the API. As on LangGraph's server they come
  after ``/ok``, ``/ready``, ``/metrics``, ``/openapi.json`` and ``/docs`` and before the
  rest, so an app may answer a path of the API itself. Each request is handed to the whole
  app (its middleware, exception handlers and lifespan run as they would alone) once the
  gate in front of every route (``serve.access``) let it in, by the rule the route declares
  (``longtask.serve.access.public``, ``signed_in``, ``reader``... on its endpoint). A route
  with no rule of its own is ``signed_in`` with ``"enable_custom_route_auth": true`` (every
  caller must be signed in, as the API's own routes require), and otherwise refused, with a
  message at startup naming the two fixes: LangGraph's server leaves such a route open to
  anyone, which with tokens set is the hole this closes. A signed-in caller's request
  carries ``scope["user"]`` (``identity``, ``display_name``, ``permissions``, and what an
  auth handler returned) as LangGraph's server's auth middleware sets it.
- ``disable_assistants``, ``disable_threads``, ``disable_runs`` (with crons),
  ``disable_store``, ``disable_mcp``, ``disable_a2a``, ``disable_meta`` (``/info``,
  ``/metrics``, ``/openapi.json`` and ``/docs``; ``/ok`` stays), ``disable_webhooks`` (runs'
  webhooks are accepted and never called) and ``disable_ui`` (longtask serves no generative
  UI routes) turn those groups off: their paths answer 404.
- ``cors``: ``allow_origins``, ``allow_origin_regex``, ``allow_methods``, ``allow_headers``,
  ``expose_headers``, ``allow_credentials``, ``max_age`` (Starlette's CORS settings), used
  unless ``--cors-origin`` or ``$LONGTASK_CORS_ORIGINS`` is given.

Other keys of LangGraph's ``http`` (``mount_prefix``, ``middleware_order``,
``configurable_headers``, ``logging_headers``...) are not carried out: ``notes`` says so at
startup rather than ignoring them silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from longtask.errors import InvalidInput
from longtask.runtime._taskref import load_module
from longtask.serve._http import error
from longtask.serve.access import Access, Caller, Rule, describe, rule_of
from longtask.serve.access._rules import resource_of

#: the groups ``disable_<group>`` turns off
GROUPS = ("assistants", "threads", "runs", "store", "mcp", "a2a", "meta", "ui", "webhooks")
_CORS_KEYS = {
    "allow_origins": list,
    "allow_origin_regex": str,
    "allow_methods": list,
    "allow_headers": list,
    "expose_headers": list,
    "allow_credentials": bool,
    "max_age": int,
}
#: the paths an app may not take from the API (LangGraph's unshadowable ones, and /ready)
FIRST_PATHS = ("/ok", "/ready", "/metrics", "/openapi.json", "/docs")
#: where the route a request matched keeps the request's scope as it came (the app's own
#: router matches it again)
_CAME = "longtask_app_scope"


@dataclass
class HttpSettings:
    """What a config file's ``http`` says (see the module)."""

    #: the app and the reference it was loaded from
    app: Starlette | None = None
    app_ref: str | None = None
    custom_route_auth: bool = False
    disabled: frozenset[str] = frozenset()
    cors: dict[str, Any] | None = None
    #: keys given that are not carried out, said at startup
    notes: list[str] = field(default_factory=list)

    def off(self, group: str) -> bool:
        return group in self.disabled


def load_http(config: str | Path | None) -> HttpSettings | None:
    """The ``http`` settings of a longtask.json or langgraph.json (None: it has none), the
    app it names imported; InvalidInput naming every key that is wrong and how to fix it."""
    from longtask.serve._registry import config_key

    found = config_key(config, "http")
    if found is None:
        return None
    path, http = found
    if not isinstance(http, dict):
        raise InvalidInput(f'{path}: "http" must be an object, e.g. {{"app": "./webapp.py:app"}}')
    problems: list[str] = []
    settings = HttpSettings()
    for key, value in http.items():
        if key == "app":
            if not isinstance(value, str) or ":" not in value:
                problems.append('"app" must name an app as "./file.py:app" or "module:app"')
            else:
                settings.app_ref = value
        elif key == "enable_custom_route_auth":
            if not isinstance(value, bool):
                problems.append('"enable_custom_route_auth" must be true or false')
            settings.custom_route_auth = value is True
        elif key.startswith("disable_") and key[8:] in GROUPS:
            if not isinstance(value, bool):
                problems.append(f'"{key}" must be true or false')
            elif value:
                settings.disabled = settings.disabled | {key[8:]}
        elif key == "cors":
            settings.cors = _cors(value, problems)
        else:
            settings.notes.append(f'http "{key}" is not carried out by longtask serve')
    if problems:
        raise InvalidInput(f"{path}: " + "; ".join(problems))
    if settings.app_ref is not None:
        settings.app = _load_app(settings.app_ref, path.resolve().parent)
    return settings


def _cors(value: Any, problems: list[str]) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        problems.append('"cors" must be an object of Starlette\'s CORS settings')
        return None
    out: dict[str, Any] = {}
    for key, item in value.items():
        kind = _CORS_KEYS.get(key)
        if kind is None:
            problems.append(f'"cors" has no setting {key!r} (known: {", ".join(_CORS_KEYS)})')
        elif not isinstance(item, kind) or (kind is int and isinstance(item, bool)):
            problems.append(f'"cors" {key!r} must be a {kind.__name__}')
        elif isinstance(item, list) and not all(isinstance(x, str) for x in item):
            problems.append(f'"cors" {key!r} must be a list of strings')
        else:
            out[key] = item
    return out


def _load_app(ref: str, folder: Path) -> Starlette:
    """The app ``ref`` names (a file relative to the config file's folder, or a module)."""
    target, _, name = ref.rpartition(":")
    try:
        module = load_module(target, folder)
    except Exception as exc:
        raise InvalidInput(f'http "app": importing {target!r} failed: {exc}') from exc
    app = getattr(module, name, None)
    if not isinstance(app, Starlette):
        found = "nothing" if app is None else type(app).__name__
        raise InvalidInput(
            f'http "app": {ref!r} names {found}, not a Starlette or FastAPI app; name the '
            "app object (app = FastAPI() or app = Starlette(...)) after the colon"
        )
    return app


class _Signed:
    """``scope["user"]`` for an app's route: who called, as LangGraph's auth middleware
    gives it (``identity``, ``display_name``, ``is_authenticated``, ``permissions``)."""

    def __init__(self, caller: Caller) -> None:
        self.identity = caller.name or ""
        self.display_name = caller.name or ""
        self.is_authenticated = caller.name is not None
        self.permissions = list(caller.permissions)
        self.role = caller.role
        #: what an auth handler's ``authenticate`` returned (None: bearer tokens)
        self.user = caller.user


class AppRoute(BaseRoute):
    """One route of the app, behind the gate: matched as the app matches it, answered by
    the whole app."""

    def __init__(self, inner: BaseRoute, app: ASGIApp, rule: Rule | None, access: Access):
        self.inner = inner
        self.app = app
        self.rule = rule
        self.access = access
        self.path = getattr(inner, "path", "")
        self.methods = getattr(inner, "methods", None)
        self.endpoint = getattr(inner, "endpoint", None)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = self.inner.matches(scope)
        if match is Match.NONE:
            return match, child
        return match, {**child, _CAME: dict(scope)}

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        return self.inner.url_path_for(name, **path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        request = Request(scope, receive)
        refused: Response | None
        if self.rule is None:
            refused = error(
                403,
                "this route of the app declares no authorization rule: refused. Declare one "
                "on its endpoint (longtask.serve.access.public, signed_in, reader...) or set "
                '"enable_custom_route_auth": true under "http" in langgraph.json',
            )
        else:
            refused = await self.access.check(self.rule, request, resource_of(self.endpoint))
        if refused is not None:
            await refused(scope, receive, send)
            return
        came = dict(scope[_CAME])
        caller = getattr(request.state, "caller", None)
        if isinstance(caller, Caller):
            came["user"] = _Signed(caller)
        await self.app(came, receive, send)


def app_routes(
    settings: HttpSettings, access: Access
) -> tuple[list[BaseRoute], list[str], list[str]]:
    """The app's routes behind the gate; the ones refused for want of a rule; and the ones
    the API keeps (``FIRST_PATHS``), said at startup."""
    app = settings.app
    if app is None:
        return [], [], []
    out: list[BaseRoute] = []
    refused: list[str] = []
    shadowed: list[str] = []
    own_docs = {getattr(app, k, None) for k in ("openapi_url", "docs_url", "redoc_url")}
    own_docs |= {getattr(app, "swagger_ui_oauth2_redirect_url", None)}
    for route in app.routes:
        path = getattr(route, "path", None)
        if path in own_docs:
            continue  # the app's own description: /openapi.json describes the app's routes
        if path in FIRST_PATHS:
            shadowed.append(describe(route))
            continue
        rule = rule_of(route) if isinstance(route, Route) else None
        if rule is None and settings.custom_route_auth:
            rule = Rule.SIGNED_IN
        if rule is None:
            refused.append(describe(route))
        out.append(AppRoute(route, app, rule, access))
    return out, refused, shadowed


def described(routes: Sequence[BaseRoute]) -> list[Route]:
    """The app's routes that /openapi.json lists (mounts and websockets are not)."""
    return [r.inner for r in routes if isinstance(r, AppRoute) and isinstance(r.inner, Route)]
