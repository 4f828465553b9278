"""The LangGraph Server API's endpoints that ``longtask serve`` does not serve, answered
with what to use instead: 404 for a path it has no counterpart for, 405 for a method it
does not take on a path it serves (Starlette would answer both with a bare "Not Found")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from longtask.serve._http import error, pasteable
from longtask.serve.access import signed_in

_MCP = (
    "/mcp is stateless Streamable HTTP: POST each JSON-RPC request to it; there is no "
    "session to resume or end"
)
_EVENTS = (
    "LangGraph's v2 event streaming is not served: follow a thread's runs with GET "
    "/threads/{thread_id}/stream, a run with GET /threads/{thread_id}/runs/{run_id}/stream, "
    "and send a command as a run: POST /threads/{thread_id}/runs with command={...}"
)
#: (path, methods, status, what to use instead), each listed with its reason in
#: docs/internals/server-differences.md; test_lg_contract.py checks that every other
#: operation of LangGraph's spec is served
UNSERVED: list[tuple[str, list[str], int, str]] = [
    # as LangGraph's server answers them (405 and 404), with what to do instead
    ("/mcp", ["GET"], 405, _MCP),
    ("/mcp", ["DELETE"], 404, _MCP),
    ("/mcp/", ["GET"], 405, _MCP),
    ("/mcp/", ["DELETE"], 404, _MCP),
    ("/threads/{thread_id}/stream/events", ["POST"], 404, _EVENTS),
    ("/threads/{thread_id}/commands", ["POST"], 404, _EVENTS),
    (
        "/docs",
        ["GET"],
        404,
        "the HTTP APIs are described in longtask's documentation (docs/reference/http.md, "
        "`mkdocs serve`); the page at / shows the threads",
    ),
]


def _answer(status: int, message: str) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return error(status, pasteable(request, f"not served by longtask: {message}"))

    return endpoint


def routes() -> list[Route]:
    """Routes answering each unserved endpoint; listed after the served ones."""
    return [
        # signed in: whoever may call the server learns what to use instead
        Route(path, signed_in(_answer(status, message)), methods=methods)
        for path, methods, status, message in UNSERVED
    ]
