"""HTTP plumbing of ``longtask serve``: JSON errors, status codes for longtask's errors, the
loopback Host guard, artifact responses, query parameters and page headers."""

from __future__ import annotations

import logging
import mimetypes
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from longtask.errors import (
    BadAnswer,
    DefinitionChanged,
    InvalidInput,
    LongTaskError,
    NothingToResume,
    ThreadBusy,
    ThreadNotFound,
)
from longtask.serve._hints import Hints
from longtask.serve._hosts import host_of, is_loopback

log = logging.getLogger("longtask.serve")


def error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    # A malformed request also carries LangGraph's shape ({"detail": ...}), which its
    # SDKs show.
    # LangGraph's error shape ({"detail": ...}) beside longtask's own ({"error": ...}).
    body = {"error": message, "detail": message}
    return JSONResponse(body, status_code=status, headers=headers)


def _status_of(exc: LongTaskError) -> int:
    if isinstance(exc, ThreadNotFound):
        return 404
    # An answer of a shape its pause cannot take: the request itself is malformed.
    if isinstance(exc, BadAnswer):
        return 422
    # Not waiting, a different plan, another process holds the thread: the request is fine
    # but conflicts with the thread's state, and that state is unchanged.
    if isinstance(exc, InvalidInput | NothingToResume | ThreadBusy | DefinitionChanged):
        return 409
    # Anything else (a task module that no longer imports, a database error) is the
    # server's problem, not the caller's.
    return 500


def pasteable(request: Request, text: str) -> str:
    """``text`` with the commands it names made to run against this server's database."""
    hints: Hints | None = getattr(request.app.state, "hints", None)
    return hints.in_text(text) if hints is not None else text


async def on_longtask_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LongTaskError)
    status = _status_of(exc)
    if status == 500:
        log.error("%s %s failed: %s", request.method, request.url.path, exc)
    if isinstance(exc, ThreadNotFound):
        # The CLI's message names the database; an HTTP client has no use for its URL.
        return error(status, f"no thread {exc.thread_id!r}")
    return error(status, pasteable(request, str(exc)))


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error(exc.status_code, pasteable(request, str(exc.detail)), exc.headers)


async def on_internal_error(request: Request, exc: Exception) -> Response:
    log.exception("%s %s failed", request.method, request.url.path)
    return error(500, f"internal error: {type(exc).__name__}")


class LoopbackHostOnly:
    """Refuses requests whose ``Host`` is not a loopback name: a page on another site whose
    DNS name was re-pointed to 127.0.0.1 (DNS rebinding) must not read the open API."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if not is_loopback(host_of(host)):
                await error(421, "this server answers only to a loopback host name")(
                    scope, receive, send
                )
                return
        await self.app(scope, receive, send)


class NoNulBytes:
    """Refuses a path or query that holds a NUL byte (``%00``) with a 400 naming where it
    is, before any route reads it: no id or value can hold one, and PostgreSQL refuses one
    in text (a DataError deep in a handler, a 500). ``routes`` name the path's fields."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            where = self._nul_in(scope)
            if where is not None:
                message = (
                    f"{where} holds a NUL byte (%00), which no id or value can hold; "
                    "remove it from the URL"
                )
                await error(400, message)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _nul_in(self, scope: Scope) -> str | None:
        query = scope.get("query_string", b"").decode("latin-1")
        if "%00" in query or "\x00" in query:
            for key, value in parse_qsl(query, keep_blank_values=True):
                if "\x00" in key:
                    return f"the name of query parameter {key!r}"
                if "\x00" in value:
                    return f"query parameter {key!r}"
        if "\x00" not in scope.get("path", ""):
            return None
        for route in self.routes:
            found, child = route.matches(scope)
            if found is not Match.NONE:
                for name, value in (child.get("path_params") or {}).items():
                    if "\x00" in str(value):
                        return f"path parameter {name!r}"
        return "the path"


def jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    to_json = getattr(value, "to_json", None)
    return to_json() if callable(to_json) else value


def artifact_response(name: str, found: Any) -> Response:
    """A Response for what the Runner's ``artifact`` returns: ``(bytes, record)`` where the
    record has a ``media_type`` (or is the media type), or just the bytes."""
    media: str | None = None
    if isinstance(found, tuple) and len(found) == 2:
        found, record = found
        media = record if isinstance(record, str) else getattr(record, "media_type", None)
    if isinstance(found, str):
        found = found.encode()
    if not isinstance(found, bytes | bytearray):
        raise TypeError(f"artifact {name!r}: cannot serve a {type(found).__name__}")
    media = media or mimetypes.guess_type(name)[0] or "application/octet-stream"
    # An artifact is content from a step, not from us: a sandboxed, unsniffed document cannot
    # run script with this origin's rights (the page keeps the token in sessionStorage).
    headers = {"Content-Security-Policy": "sandbox", "X-Content-Type-Options": "nosniff"}
    return Response(bytes(found), media_type=media, headers=headers)


def unauthorized(message: str) -> Response:
    return error(401, message, {"WWW-Authenticate": 'Bearer realm="longtask"'})


def page_response(page: tuple[str, str], status: int = 200) -> Response:
    html, nonce = page
    csp = (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    return HTMLResponse(html, status_code=status, headers={"Content-Security-Policy": csp})


#: the largest integer a database column of ours holds (a signed 64-bit one): an event id
#: or a count above it is refused as out of range, on every backend alike
MAX_INT = 2**63 - 1


def int_value(raw: str, name: str, low: int = 0, high: int | None = None) -> int:
    """``raw`` as an integer from ``low`` to ``high`` (at most ``MAX_INT``), or a 400
    saying what it must be."""
    high = MAX_INT if high is None else min(high, MAX_INT)
    try:
        value = int(raw)
    except ValueError:
        raise HTTPException(400, f"{name} must be an integer, not {raw[:40]!r}") from None
    if value < low or (high is not None and value > high):
        raise HTTPException(400, f"{name} must be an integer from {low} to {high}")
    return value


def int_param(
    request: Request, name: str, default: int, *, low: int = 0, high: int | None = None
) -> int:
    raw = request.query_params.get(name)
    return default if raw in (None, "") else int_value(raw, name, low, high)
