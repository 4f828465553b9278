"""A canonical encoding of call arguments: the same value gives the same bytes in every
process.

Effect and tool-call keys hash their arguments. ``json.dumps(..., default=str)`` is not
stable: the ``str()`` of a set follows the process's hash seed, and a plain object's holds
its memory address, so a process that resumes after a crash would derive another key and
call the outside system a second time. Here a dict's keys are sorted, a set's members are
sorted by their own encoding, and a value with no stable form is refused (the caller then
gives ``key=``) rather than guessed at.

Values that JSON cannot tell apart from others (bytes and str, a tuple of a datetime and
the datetime's ISO text) are tagged: ``{"$bytes": "..."}``. A plain dict that itself has a
single key starting with ``$`` is tagged too, so no argument can pose as a tagged value.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import hashlib
import json
import uuid
from decimal import Decimal
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel

from longtask.errors import InvalidInput

#: guards against a self-referencing value; far deeper than any real argument
_MAX_DEPTH = 200


class NotCanonical(InvalidInput):
    """A value has no canonical encoding (an arbitrary object, a function, NaN...)."""


def _tag(name: str, value: Any) -> dict[str, Any]:
    return {f"${name}": value}


def _key(k: Any, where: str) -> str:
    if isinstance(k, str):
        return k
    if isinstance(k, bool) or k is None:
        return json.dumps(k)
    if isinstance(k, (int, float)):
        return json.dumps(k)
    raise NotCanonical(f"{where} has a dict key of type {type(k).__name__} ({k!r:.60})")


def canonical(value: Any, where: str = "value", _depth: int = 0) -> Any:
    """``value`` as plain JSON data with one form per meaning (see the module docstring).

    Raises :class:`NotCanonical` naming ``where`` for a value that has no such form.
    """
    if _depth > _MAX_DEPTH:
        raise NotCanonical(f"{where} is nested more than {_MAX_DEPTH} levels deep")
    d = _depth + 1
    if isinstance(value, enum.Enum):
        cls = type(value)
        name = f"{cls.__module__}:{cls.__qualname__}"
        return _tag("enum", [name, canonical(value.value, where, d)])
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        # JSON text of a float is its repr: exact, and 1.0 stays apart from 1.
        return float(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise NotCanonical(f"{where} holds the decimal {value}, which has no stable form")
        # normalize(): Decimal("1.50") and Decimal("1.5") are equal, so they share a key.
        return _tag("decimal", str(value.normalize()))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _tag("bytes", base64.b64encode(bytes(value)).decode())
    if isinstance(value, dt.datetime):
        return _tag("datetime", value.isoformat())
    if isinstance(value, dt.date):
        return _tag("date", value.isoformat())
    if isinstance(value, dt.time):
        return _tag("time", value.isoformat())
    if isinstance(value, dt.timedelta):
        return _tag("timedelta", [value.days, value.seconds, value.microseconds])
    if isinstance(value, uuid.UUID):
        return _tag("uuid", str(value))
    if isinstance(value, PurePath):
        return _tag("path", value.as_posix())
    if isinstance(value, BaseModel):
        # Python mode keeps a set a set (JSON mode lists it in hash-seed order); a field of a
        # type only pydantic knows (a URL...) falls back to JSON mode.
        try:
            return canonical(value.model_dump(), where, d)
        except NotCanonical:
            return canonical(value.model_dump(mode="json"), where, d)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return canonical(fields, where, d)
    if isinstance(value, dict):
        out = {_key(k, where): canonical(v, where, d) for k, v in value.items()}
        if len(out) != len(value):
            raise NotCanonical(f"{where} has dict keys that collide once made text")
        if len(out) == 1 and next(iter(out)).startswith("$"):
            return _tag("dict", out)
        return dict(sorted(out.items()))
    if isinstance(value, (list, tuple)):
        return [canonical(v, where, d) for v in value]
    if isinstance(value, (set, frozenset)):
        members = [canonical(v, where, d) for v in value]
        return _tag("set", sorted(members, key=_dumps))
    raise NotCanonical(
        f"{where} holds a {type(value).__module__}.{type(value).__qualname__}, which has no "
        "canonical encoding (its text may differ between processes)"
    )


def _dumps(value: Any) -> str:
    # json.dumps's default separators and ASCII escapes: plain JSON arguments keep the key
    # they had before this encoder (a thread upgraded mid-run finds its ledger rows).
    return json.dumps(value, sort_keys=True)


def canonical_json(value: Any, where: str = "value") -> str:
    """The canonical encoding of ``value`` as JSON text (keys sorted)."""
    return _dumps(canonical(value, where))


def canonical_digest(value: Any, where: str = "value", length: int = 16) -> str:
    """A hex SHA-256 prefix of the canonical encoding of ``value``."""
    return hashlib.sha256(canonical_json(value, where).encode()).hexdigest()[:length]
