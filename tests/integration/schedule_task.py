"""Tasks with schedules, loaded by file reference (``.../schedule_task.py:nightly``) by the
tests, ``longtask tick`` and workers in other processes."""

from __future__ import annotations

from pydantic import BaseModel

from longtask import LongTask, Schedule, Stage, StepContext, function_step


class Inputs(BaseModel):
    who: str


@function_step
def greet(ctx: StepContext) -> dict[str, str]:
    return {"hello": ctx.inputs.who}


nightly = LongTask(
    "nightly",
    [Stage("main", [greet])],
    inputs=Inputs,
    schedules=[
        Schedule("0 3 * * *", inputs={"who": "paris"}, timezone="Europe/Paris", name="nightly"),
        Schedule("*/15 * * * *", inputs={"who": "often"}),
    ],
)

#: the same task with one schedule changed and one gone (a later deploy)
nightly_v2 = LongTask(
    "nightly",
    [Stage("main", [greet])],
    inputs=Inputs,
    schedules=[
        Schedule("0 4 * * *", inputs={"who": "paris"}, timezone="Europe/Paris", name="nightly"),
    ],
)

#: no schedules of its own: given ones with `schedule add --cron`
plain = LongTask("plain", [Stage("main", [greet])], inputs=Inputs)
