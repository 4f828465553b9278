"""The one reader of every JSON request body ``longtask serve`` takes: bounded in size
while it is read (``BodyLimit``, in front of every route), and in depth before it is
parsed.

Python's JSON parser recurses once per nested array or object, and so does everything
after it (the codec, pydantic, a checkpoint's serializer): a body of 200,000 ``[`` or a
comment nested a few thousand levels deep would end in a ``RecursionError`` somewhere in
a handler, a 500. No value a task or the Server API takes nests anywhere near ``MAX_DEPTH``,
so a deeper body is refused as malformed, naming the field it is in.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from longtask.serve._http import error

#: the largest request body taken by default, in bytes (``serve --max-body``)
MAX_BODY = 1024 * 1024
#: the environment variable that sets it
ENV_MAX_BODY = "LONGTASK_MAX_BODY"
_SIZE = re.compile(r"\s*(\d+)\s*(b|kib|mib|gib|kb|mb|gb)?\s*", re.IGNORECASE)
_UNITS = {"b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "kb": 1000, "mb": 1000**2}
_UNITS["gb"] = 1000**3


def parse_size(text: str, what: str = "--max-body") -> int:
    """A size in bytes from ``1048576``, ``512KiB``, ``4MiB``, ``1GiB`` (or kB, MB, GB);
    InvalidInput naming the accepted forms otherwise."""
    from longtask.errors import InvalidInput

    found = _SIZE.fullmatch(text)
    size = int(found.group(1)) * _UNITS[(found.group(2) or "b").lower()] if found else 0
    if size < 1:
        raise InvalidInput(
            f"{what}: {text!r} is not a size; give bytes (1048576) or a number with KiB, "
            "MiB or GiB (4MiB)"
        )
    return size


def too_large(limit: int) -> str:
    return (
        f"the body is larger than this server takes ({limit} bytes): send less (a large "
        f"value belongs in an artifact), or start serve with a larger --max-body "
        f"(${ENV_MAX_BODY})"
    )


class BodyLimit:
    """The one bound on request bodies, for every route (the gate's look at a body, the
    routes' own readers, A2A and MCP alike): 413 when the ``Content-Length`` says more
    than ``limit`` bytes, or when more arrive than that while the body is read (an
    ``HTTPException`` from ``receive``, answered by the app's error handler)."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            await error(413, too_large(limit))(scope, receive, send)
            return
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise HTTPException(413, too_large(limit))
            return message

        await self.app(scope, bounded, send)


#: the deepest nesting of arrays and objects a body may have
MAX_DEPTH = 100

# A JSON string (escapes included) or one of the characters that give a body its shape;
# everything else (numbers, literals, white space) cannot change the depth.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}:]', re.DOTALL)


async def read_json_body(request: Request) -> Any:
    """The request's JSON body (None when it is empty), or a 4xx that says what is wrong:
    413 over the server's limit (``BodyLimit``; ``MAX_BODY`` bytes by default), 400 when
    it is not JSON or nests deeper than ``MAX_DEPTH``."""
    raw = b""
    limit = int(getattr(request.app.state, "max_body", MAX_BODY))
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limit:  # checked while reading: a huge body is never held
            raise HTTPException(413, too_large(limit))
    if not raw.strip():
        return None
    _refuse_deep(raw)
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise HTTPException(400, f"the body is not JSON: {exc}") from None
    except RecursionError:  # pragma: no cover - _refuse_deep bounds the depth first
        raise HTTPException(400, _too_deep(None)) from None
    if b"\\u0000" in raw:  # the only way JSON spells a NUL: look closer
        _refuse_nul(data, "the body")
    return data


def _refuse_nul(value: Any, where: str) -> None:
    """422 for a NUL character in any text of the body, naming where (``metadata.key``):
    PostgreSQL stores none (in text or JSON), so it is refused on every backend before
    anything is stored, rather than failing deep in a write on one of them."""
    if isinstance(value, str):
        if "\x00" in value:
            raise HTTPException(
                422,
                f"{where} holds a NUL byte (\\u0000), which the database cannot store; "
                "remove it (send binary data base64-encoded)",
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            inner = key if where == "the body" else f"{where}.{key}"
            _refuse_nul(key, f"a key of {where}")
            _refuse_nul(item, inner)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _refuse_nul(item, f"{where}[{i}]")


def _refuse_deep(raw: bytes) -> None:
    # A body with no more brackets than the bound cannot nest deeper (the common case, and
    # a count in C); only the rest is scanned.
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return
    depth = 0
    last_text = b""
    field: bytes | None = None
    for match in _TOKEN.finditer(raw):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > MAX_DEPTH:
                raise HTTPException(400, _too_deep(field))
        elif token in (b"]", b"}"):
            depth -= 1
        elif token == b":":
            if depth == 1:  # a key of the body's own object: the field the value belongs to
                field = last_text
        else:
            last_text = token


def _too_deep(field: bytes | None) -> str:
    where = "the body"
    if field is not None:
        try:
            where = repr(json.loads(field))
        except ValueError:  # pragma: no cover - the token is a complete JSON string
            where = field.decode("utf-8", "replace")
    return (
        f"{where} nests arrays and objects deeper than {MAX_DEPTH} levels; send a flatter "
        "value (a large structure belongs in an artifact, not in a request)"
    )
