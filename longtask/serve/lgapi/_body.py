"""Fields of a LangGraph Server API request body, checked: a malformed one is a 422 that
says which field is wrong and what it takes (as LangGraph's server answers), never a 500
from deep inside a handler."""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException


def integer_field(body: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise HTTPException(422, f"{key} must be an integer from {low} to {high}, not {value!r}")
    return value


def query_integer(query: Any, key: str, default: int, low: int, high: int) -> int:
    """An integer query parameter (given once), or a 422 naming it."""
    values = query.getlist(key)
    if not values:
        return default
    try:
        value = int(values[-1])
    except ValueError:
        value = None
    if len(values) > 1 or value is None or not low <= value <= high:
        raise HTTPException(
            422, f"{key} must be one integer from {low} to {high}, not {', '.join(values)}"
        )
    return value


def mapping_field(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise HTTPException(422, f"{key} must be an object, not {value!r}")
    return value


def strings_field(body: dict[str, Any], key: str) -> list[str] | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise HTTPException(422, f"{key} must be a list of strings, not {value!r}")
    return value


def text_field(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise HTTPException(422, f"{key} must be a string, not {value!r}")
    return value


def id_text(value: Any, name: str) -> str | None:
    """An id given in a body (a checkpoint's, say), or a 422 naming it: a string with no NUL
    byte, which no id holds and PostgreSQL refuses in text."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise HTTPException(422, f"{name} must be a string, not {value!r}")
    if "\x00" in value:
        raise HTTPException(422, f"{name} holds a NUL byte (\\u0000), which no id holds")
    return value
