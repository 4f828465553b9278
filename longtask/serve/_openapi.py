"""``GET /openapi.json``: an OpenAPI 3.1 description of what this server serves, made from
its routes, so the list cannot drift from them. Each served path and method is one
operation, with its path parameters and the summary its endpoint's docstring gives. The
LangGraph Server API's bodies are LangGraph's (its own spec describes them); longtask's
``/api`` and page routes are described in docs/reference/http.md. Endpoints of LangGraph's
API that longtask does not serve (answered with what to use instead) are not listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from starlette.routing import Route

from longtask._version import __version__

#: a path parameter with a converter (``{name:path}``), shown by its name only
_CONVERTER = re.compile(r"\{(\w+):\w+\}")
_PARAM = re.compile(r"\{(\w+)\}")


def _summary(route: Route) -> str | None:
    """The first line of the endpoint's own docstring (the gate's wrapper keeps it as
    ``__wrapped__``), if it has one."""
    endpoint: Any = route.endpoint
    while getattr(endpoint, "__wrapped__", None) is not None:
        endpoint = endpoint.__wrapped__
    doc = (getattr(endpoint, "__doc__", None) or "").strip()
    return doc.splitlines()[0].rstrip(".") if doc else None


def _operation_id(method: str, path: str) -> str:
    words = re.sub(r"[^0-9a-zA-Z]+", "_", path).strip("_") or "root"
    # a path served with and without its trailing slash (/mcp, /mcp/) is two operations
    slash = "_slash" if len(path) > 1 and path.endswith("/") else ""
    return f"{method.lower()}_{words}{slash}"


def describe(routes: Iterable[Route]) -> dict[str, Any]:
    """The OpenAPI document of ``routes`` (the served ones)."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        path = _CONVERTER.sub(r"{\1}", route.path)
        params = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in _PARAM.findall(path)
        ]
        summary = _summary(route)
        for method in sorted((route.methods or {"GET"}) - {"HEAD"}):
            operation: dict[str, Any] = {
                "operationId": _operation_id(method, path),
                "responses": {"default": {"description": "see docs/reference/http.md"}},
            }
            if summary:
                operation["summary"] = summary
            if params:
                operation["parameters"] = params
            paths.setdefault(path, {})[method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "longtask serve",
            "version": __version__,
            "description": (
                "The LangGraph Server API as longtask serves it, and longtask's own /api "
                "routes and page. Request and response bodies: LangGraph's API reference "
                "for its routes, docs/reference/http.md for longtask's."
            ),
        },
        "paths": dict(sorted(paths.items())),
    }
