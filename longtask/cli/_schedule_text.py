"""How a schedule reads on the command line: a fire time in the schedule's own timezone and
in UTC, and the line ``status`` prints about the schedule that started a thread.

Below both ``_schedules`` (the ``longtask schedule`` commands) and ``_output`` (which prints
a status), so printing a status imports no command module."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.markup import escape


def when(at: datetime, timezone: str) -> str:
    """``2026-12-02 03:00 CET (02:00 UTC)``: the schedule's own time first."""
    from zoneinfo import ZoneInfo

    local = at.astimezone(ZoneInfo(timezone))
    utc = at.astimezone(UTC)
    if local.utcoffset() == utc.utcoffset():
        return f"{utc:%Y-%m-%d %H:%M} UTC"
    utc_text = utc.strftime("%H:%M" if local.date() == utc.date() else "%Y-%m-%d %H:%M")
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()} ({utc_text} UTC)"


def schedule_lines(info: dict[str, Any]) -> list[str]:
    """What ``status`` prints about the schedule that started a thread."""
    name = escape(info["name"])
    if not info.get("registered"):
        return [f"started by schedule {name} (since removed)"]
    nxt = datetime.fromisoformat(info["next_fire_at"])
    state = "paused" if info.get("paused") else f"next fire {when(nxt, info['timezone'])}"
    return [f"started by schedule {name}; {state}"]
