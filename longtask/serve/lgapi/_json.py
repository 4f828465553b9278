"""Values as the LangGraph Server API's JSON: datetimes and models as text."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from longtask.store._apiruns import ApiRun


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


def run_json(run: ApiRun) -> dict[str, Any]:
    """A run as LangGraph's Run object (what runs.get/list answer and a webhook sends)."""
    return {
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "assistant_id": run.assistant_id,
        "created_at": iso(run.created_at),
        "updated_at": iso(run.updated_at),
        "status": run.status,
        "metadata": run.metadata,
        # runs recorded before strategies were kept were refused while another was open
        "multitask_strategy": run.request.get("multitask_strategy", "reject"),
        "langsmith_session_name": None,
        "kwargs": {
            **(run.request.get("kwargs") or {}),
            "stream_mode": run.request.get("stream_mode", ["values"]),
        },
        **({"error": run.error} if run.error else {}),
    }
