"""Which steps a dead run left mid-attempt, read from the thread's event log."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from longtask.runtime._recovery import open_steps
from longtask.store import Event


def _log(*rows: tuple[str, str | None] | tuple[str, str | None, dict[str, Any]]) -> list[Event]:
    now = datetime.now(UTC)
    return [
        Event(i + 1, "t", row[0], "s", row[1], 1, row[2] if len(row) > 2 else {}, now)
        for i, row in enumerate(rows)
    ]


def test_a_started_step_with_no_end_is_open() -> None:
    events = _log(
        ("step.started", "a"),
        ("step.completed", "a"),
        ("step.started", "b"),
        ("step.progress", "b"),
        ("step.started", "c"),
        ("step.failed", "c"),
    )
    assert sorted(open_steps(events)) == ["b"]
    assert open_steps(events)["b"].id == 3


def test_waiting_is_not_running() -> None:
    # a back-off with no work after it, an approval that asked, a wait that started
    events = _log(
        ("step.started", "a"),
        ("step.retry", "a"),
        ("step.started", "gate"),
        ("approval.required", "gate"),
        ("step.started", "ci"),
        ("wait.started", "ci"),
        ("step.started", "b"),
        ("step.retry", "b"),
        ("step.progress", "b"),  # the next attempt ran after the back-off
    )
    assert sorted(open_steps(events)) == ["b"]


def test_an_item_failure_leaves_the_map_running_and_an_abandoned_attempt_ends() -> None:
    events = _log(
        ("step.failed", "n", {"item": 0}),  # an item's event with no start seen: not open
        ("step.started", "m"),
        ("step.failed", "m", {"item": 3}),
        ("step.started", "x"),
        ("step.abandoned", "x"),
    )
    assert sorted(open_steps(events)) == ["m"]
