"""An event to append (``NewEvent``) and its data as JSON that PostgreSQL stores.

Below ``_store`` so the tables mixed into ``Store`` (``_effects``) and the event writer can
name the event type without importing the store that imports them.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NewEvent:
    """An event to append; ``key`` makes the insert idempotent (see ``append_event``)."""

    thread_id: str
    kind: str
    key: str
    stage: str | None = None
    step: str | None = None
    attempt: int | None = None
    data: dict[str, Any] | None = None
    ts: float = field(default_factory=time.time)

    def params(self) -> tuple[Any, ...]:
        return (
            self.thread_id,
            self.kind,
            self.stage,
            self.step,
            self.attempt,
            event_json(self.data),
            self.ts,
            f"{self.thread_id}/{self.key}",
        )


# \u0000 and surrogates as json.dumps writes them (an astral character's valid pair, or a
# backslash written before "u0000", matches too: it only costs a cleaning pass)
_UNSTORABLE = re.compile(r"\\u0000|\\ud[89a-f]")


def event_json(data: dict[str, Any] | None) -> str:
    """An event's data as JSON text that PostgreSQL's ``jsonb`` accepts: text from a failing
    step (its error message, a tool's output) may hold a NUL character or a lone surrogate,
    which jsonb refuses; stored as is, the event would fail the transaction of the
    checkpoint it commits with. They become U+FFFD."""
    text = json.dumps(data or {}, default=str)
    if "\\u" in text and _UNSTORABLE.search(text):
        text = json.dumps(_storable(data or {}), default=lambda o: _storable(str(o)))
    return text


def _storable(value: Any) -> Any:
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "\ufffd")
        # a lone surrogate cannot be encoded; a valid pair survives the round trip
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_storable(str(k)): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value
