"""Step results, plans and payloads as the CLI shows them in text: JSON (never Python's
repr), indented when it does not fit on one line, and with every multi-line string shown as
a text block (``|`` then its lines, indented) instead of one escaped ``"…\\n…"`` line.
``--json`` prints plain JSON instead."""

from __future__ import annotations

import json
from typing import Any

#: a list or object whose one-line JSON is at most this long stays on one line
_INLINE = 60


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: pydantic models, dates and the like converted."""
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value, fallback=str)


def _has_block(value: Any) -> bool:
    if isinstance(value, str):
        return "\n" in value.rstrip("\n")
    if isinstance(value, dict):
        return any(_has_block(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_block(v) for v in value)
    return False


def _lines(value: Any, pad: str) -> list[str]:
    """``value`` as lines; the first goes after a key (no indent), the others carry
    ``pad``, the indent of the line the value starts on."""
    if isinstance(value, str) and _has_block(value):
        return ["|", *(f"{pad}  {line}".rstrip() for line in value.rstrip("\n").split("\n"))]
    compact = json.dumps(value, ensure_ascii=False)
    if (
        not isinstance(value, dict | list)
        or not value
        or (len(compact) <= _INLINE and not _has_block(value))
    ):
        return [compact]
    inner = pad + "  "
    items: list[tuple[str | None, Any]] = (
        [(str(k), v) for k, v in value.items()]
        if isinstance(value, dict)
        else [(None, v) for v in value]
    )
    out = ["{" if isinstance(value, dict) else "["]
    for i, (key, item) in enumerate(items):
        sub = _lines(item, inner)
        label = f"{json.dumps(key, ensure_ascii=False)}: " if key is not None else ""
        block = sub[0] == "|"
        sub[0] = inner + label + sub[0]
        if i < len(items) - 1 and not block:
            sub[-1] += ","  # a text block ends where the indentation returns: no comma
        out.extend(sub)
    out.append(pad + ("}" if isinstance(value, dict) else "]"))
    return out


def render(value: Any, pad: str = "", *, max_lines: int | None = None) -> str:
    """``value`` for a line that starts with ``pad`` (first line without it): JSON, with
    multi-line strings as text blocks. ``max_lines`` cuts it short, saying so."""
    lines = _lines(jsonable(value), pad)
    if max_lines is not None and len(lines) > max_lines:
        cut = len(lines) - max_lines + 1
        lines = [*lines[: max_lines - 1], f"{pad}… ({cut} more lines; --json shows all)"]
    return "\n".join(lines)


def render_text(value: Any) -> str:
    """A value on its own: a string as its text, anything else as :func:`render`."""
    value = jsonable(value)
    if isinstance(value, str):
        return value.rstrip("\n")
    return render(value)
