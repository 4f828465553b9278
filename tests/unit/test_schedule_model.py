"""Schedule definitions: validated with their task (one DefinitionError for every problem),
stable derived names, and the tick arithmetic in a timezone (DST included)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from longtask import DefinitionError, LongTask, Schedule, Stage, StepContext, function_step
from longtask.model._schedule import latest_tick, next_tick, tick_id, ticks_between


class Inputs(BaseModel):
    who: str


@function_step
def greet(ctx: StepContext) -> str:
    return str(ctx.inputs.who)


def task(*schedules: Schedule, **kw: object) -> LongTask:
    return LongTask("nightly", [Stage("main", [greet])], inputs=Inputs, schedules=schedules, **kw)


def test_every_schedule_problem_is_reported_with_the_tasks_other_problems() -> None:
    with pytest.raises(DefinitionError) as caught:
        LongTask(
            "nightly",
            [Stage("main", [])],  # a problem of the task itself
            inputs=Inputs,
            schedules=[
                Schedule("0 3 * *", inputs={"who": "a"}),
                Schedule("61 * * * *", inputs={"who": "b"}),
                Schedule("0 3 * * *", inputs={"who": "c"}, timezone="Mars/Olympus"),
                Schedule("0 3 * * *", inputs={"whom": "d"}),
                Schedule("0 3 * * *", inputs={}),
                Schedule("0 3 * * *", inputs={"who": "e"}, name="Bad Name"),
                Schedule("0 0 30 2 *", inputs={"who": "f"}),
                Schedule("0 5 * * *", inputs={"who": "g"}, name="twice"),
                Schedule("0 6 * * *", inputs={"who": "h"}, name="twice"),
            ],
        )
    problems = caught.value.problems
    text = "\n".join(problems)
    assert "stage 'main' has no steps" in text
    assert "cron '0 3 * *' has 4 fields; give five" in text
    assert "cron '61 * * * *' is not valid" in text
    assert "timezone 'Mars/Olympus' is unknown" in text
    assert "inputs have unknown key 'whom'; Inputs takes who" in text
    assert "inputs do not match Inputs: who: Field required" in text
    assert "the name 'Bad Name' is not allowed" in text
    assert "names no time that exists" in text
    assert "two schedules are named 'twice'" in text
    assert len(problems) == 9


def test_identical_unnamed_schedules_are_a_duplicate() -> None:
    with pytest.raises(DefinitionError, match="declared twice"):
        task(Schedule("0 3 * * *", inputs={"who": "a"}), Schedule("0 3 * * *", inputs={"who": "a"}))


def test_a_valid_schedule_keeps_the_definition_hash() -> None:
    with_schedule = task(Schedule("0 3 * * *", inputs={"who": "a"}, timezone="Europe/Paris"))
    assert with_schedule.definition_hash == task().definition_hash
    assert with_schedule.schedules[0].catch_up == "one"


def test_derived_names_are_stable_and_differ_by_what_the_schedule_does() -> None:
    a = Schedule("0 3 * * *", inputs={"who": "a", "n": 1})
    same = Schedule("0 3 * * *", inputs={"n": 1, "who": "a"})
    other = Schedule("0 3 * * *", inputs={"who": "b", "n": 1})
    name = a.name_for("Nightly Report")
    assert name.startswith("nightly-report-") and len(name) == len("nightly-report-") + 8
    assert same.name_for("Nightly Report") == name
    assert other.name_for("Nightly Report") != name
    assert Schedule("0 3 * * *", name="mine").name_for("x") == "mine"


def test_ticks_follow_the_schedules_timezone() -> None:
    # 03:00 in Paris is 02:00 UTC in winter and 01:00 UTC in summer.
    winter = next_tick("0 3 * * *", "Europe/Paris", datetime(2026, 12, 1, 12, tzinfo=UTC))
    summer = next_tick("0 3 * * *", "Europe/Paris", datetime(2026, 7, 1, 12, tzinfo=UTC))
    assert winter == datetime(2026, 12, 2, 2, tzinfo=UTC)
    assert summer == datetime(2026, 7, 2, 1, tzinfo=UTC)
    assert tick_id("nightly", winter) == "nightly-20261202T0200Z"


def test_a_repeated_wall_clock_time_fires_once_and_a_skipped_one_after_the_gap() -> None:
    # Paris goes back from 03:00 CEST to 02:00 CET on 25 October 2026: 02:30 happens twice.
    back = list(
        ticks_between(
            "30 2 * * *",
            "Europe/Paris",
            datetime(2026, 10, 24, 12, tzinfo=UTC),
            datetime(2026, 10, 26, 12, tzinfo=UTC),
        )
    )
    assert back == [
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 26, 1, 30, tzinfo=UTC),
    ]
    # And forward from 02:00 CET to 03:00 CEST on 29 March 2026: 02:30 does not exist.
    forward = next_tick("30 2 * * *", "Europe/Paris", datetime(2026, 3, 28, 12, tzinfo=UTC))
    assert forward == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 03:00 CEST


def test_the_latest_tick_includes_now_exactly() -> None:
    on = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    assert latest_tick("0 3 * * *", "UTC", on) == on
    assert latest_tick(
        "0 3 * * *", "UTC", on.replace(minute=0, second=0, microsecond=0, hour=2)
    ) == datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
