"""Tasks of the notification tests (tests/acceptance/test_notifications.py), imported by
reference from the processes those tests start."""

from __future__ import annotations

from pydantic import BaseModel

from longtask import LongTask, Stage, approval, function_step, wait_for


def plan(ctx: object) -> dict[str, object]:
    return {"deploy": "v2", "hosts": 3}


@function_step
def build(ctx: object) -> str:
    return "built"


@function_step(after="release")
def ship(ctx: object) -> str:
    return "shipped"


class Reply(BaseModel):
    ok: bool
    note: str


#: one approval between two steps; notified through $LONGTASK_NOTIFY
RELEASE = LongTask(
    "notify_release",
    [
        Stage("build", [build]),
        Stage(
            "approve",
            [approval("release", plan=plan, approvers=["carol"], timeout=86400), ship],
        ),
    ],
)

#: a wait for an outside event with a payload schema
CALLBACK = LongTask("notify_callback", [Stage("wait", [wait_for("callback", schema=Reply)])])


@function_step
def broken(ctx: object) -> str:
    raise ValueError("bad input: the release notes are empty")


#: a step that fails for good (invalid input is never retried)
BROKEN = LongTask("notify_broken", [Stage("only", [broken])])
