"""The one reader of every JSON request body ``longtask serve`` takes: bounded in size
while it is read, and in depth before it is parsed.

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

#: the largest body read, in bytes
MAX_BODY = 1024 * 1024
#: the deepest nesting of arrays and objects a body may have
MAX_DEPTH = 100

# A JSON string (escapes included) or one of the characters that give a body its shape;
# everything else (numbers, literals, white space) cannot change the depth.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}:]', re.DOTALL)


async def read_json_body(request: Request) -> Any:
    """The request's JSON body (None when it is empty), or a 4xx that says what is wrong:
    413 over ``MAX_BODY`` bytes, 400 when it is not JSON or nests deeper than
    ``MAX_DEPTH``."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:  # checked while reading: a huge body is never held
            raise HTTPException(413, f"the body is larger than {MAX_BODY} bytes")
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
