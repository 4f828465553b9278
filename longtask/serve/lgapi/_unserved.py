"""The LangGraph Server API's endpoints that ``longtask serve`` does not serve, answered
with what to use instead: 404 for a path it has no counterpart for, 405 for a method it
does not take on a path it serves (Starlette would answer both with a bare "Not Found")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from longtask.serve._access import signed_in
from longtask.serve._http import error, pasteable

#: (path, methods, status, what to use instead): none left since crons are served (issue
#: 43); kept for an endpoint a later LangGraph server adds before longtask serves it
UNSERVED: list[tuple[str, list[str], int, str]] = []


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
