"""Text that cannot be stored: a lone surrogate (``"\\ud800"`` from JSON, or an invalid
byte of a command-line argument, which Python decodes to one) has no UTF-8 form, so the
database driver would fail on it after the answer was accepted. It is refused up front."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from longtask.errors import InvalidInput


def _where(path: str, key: Any) -> str:
    return f"{path}[{key!r}]"


def bad_text(value: Any, path: str = "") -> str | None:
    """Where in ``value`` a string with no UTF-8 form is (``path`` names it), or None."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="python")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"{path or 'the value'} (character {exc.start}: {value[exc.start]!r})"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            found = bad_text(k, f"{path} key") if isinstance(k, str) else None
            found = found or bad_text(v, _where(path, k))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = bad_text(v, _where(path, i))
            if found:
                return found
    return None


def refuse_bad_text(value: Any, what: str) -> None:
    """Raise InvalidInput naming ``what`` and where in it text cannot be stored."""
    found = bad_text(value, what)
    if found is not None:
        raise InvalidInput(
            f"{found} is not valid Unicode text (a lone surrogate or an invalid byte): "
            "send UTF-8 text; nothing was stored"
        )
