"""Which browser pages may call ``longtask serve`` from another origin (CORS).

A page served from another origin (Agent Chat UI on ``http://localhost:3000``, Studio, a
``useStream`` app) can read the API's answers only if the server says its origin may. By
default pages on a loopback origin may (``localhost``, ``127.0.0.1``, ``[::1]``, any port):
what ``longtask serve`` on a laptop is for. ``--cors-origin`` (repeatable) or
``$LONGTASK_CORS_ORIGINS`` (comma-separated) replace that list: exact origins
(``https://chat.example.com``), ``*`` for any origin, or ``none`` for no cross-origin page
at all. CORS decides which pages may read; it never replaces a token (with any token
configured, every request but the public ones needs one: ``serve.access``). Credentials
(cookies) are never allowed, for ``*`` or any origin: tokens travel in a header.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from longtask.errors import InvalidInput

ENV_CORS = "LONGTASK_CORS_ORIGINS"
#: the default: a page on a loopback host, any port, http or https
LOOPBACK_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d{1,5})?"
#: what the LangGraph SDKs read from an answer's headers (a run's location)
_EXPOSED = ["Content-Location", "Location"]


def cors_origins_from_env(environ: dict[str, str] | Any) -> list[str] | None:
    raw = environ.get(ENV_CORS)
    if raw is None or not raw.strip():
        return None
    return [part.strip() for part in raw.split(",") if part.strip()]


def check_origins(origins: Sequence[str]) -> list[str]:
    """The origins as given, or InvalidInput naming every one that is not an origin."""
    bad = []
    for origin in origins:
        if origin in ("*", "none"):
            continue
        parts = urlsplit(origin)
        if (
            parts.scheme not in ("http", "https")
            or not parts.netloc
            or parts.path not in ("", "/")
            or parts.query
            or parts.fragment
        ):
            bad.append(origin)
    if bad:
        raise InvalidInput(
            f"not an origin: {', '.join(repr(b) for b in bad)}. Give each --cors-origin "
            f"(or {ENV_CORS}, comma-separated) as scheme://host[:port], e.g. "
            "http://localhost:3000, or * for any origin, or none for no cross-origin page"
        )
    if "none" in origins and len(origins) > 1:
        raise InvalidInput("--cors-origin none cannot be combined with other origins")
    return [o.rstrip("/") for o in origins]


def cors_middleware(
    origins: Sequence[str] | None, config: Mapping[str, Any] | None = None
) -> Middleware | None:
    """The middleware for ``origins`` (None: loopback pages, or what ``config`` says;
    ``["none"]``: no CORS). ``config``: langgraph.json's ``http.cors`` (Starlette's CORS
    settings, each replacing longtask's default of that setting), used only when no origins
    are given (``--cors-origin`` and ``$LONGTASK_CORS_ORIGINS`` win)."""
    common: dict[str, Any] = {
        "allow_methods": ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
        "allow_headers": ["*"],
        "expose_headers": _EXPOSED,
        # tokens travel in a header, never in a cookie: no credentials mode
        "allow_credentials": False,
        "max_age": 600,
    }
    if origins is None and config:
        settings = {**common, **config}
        if "allow_origins" in config:
            settings["allow_origins"] = check_origins(config["allow_origins"])
        elif "allow_origin_regex" not in config:
            settings["allow_origin_regex"] = LOOPBACK_ORIGINS
        return Middleware(CORSMiddleware, **settings)
    if origins is None:
        return Middleware(CORSMiddleware, allow_origin_regex=LOOPBACK_ORIGINS, **common)
    checked = check_origins(origins)
    if checked == ["none"]:
        return None
    return Middleware(CORSMiddleware, allow_origins=checked, **common)
