"""Values as the LangGraph Server API's JSON: datetimes and models as text."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any


def plain(value: Any) -> Any:
    """``value`` as JSON data (datetimes and models as text, like the rest of the API)."""
    return json.loads(json.dumps(value, default=_default))


def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return str(value)


def iso(ts: float | datetime) -> str:
    when = ts if isinstance(ts, datetime) else datetime.fromtimestamp(ts, UTC)
    return when.isoformat()


def sse(event: str, data: Any) -> bytes:
    """One server-sent event."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"event: {event}\ndata: {text}\n\n".encode()
