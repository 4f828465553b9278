"""Tasks for the browser test of the page's actions (issue 29, item 11).

``deploy`` waits for an outside event with a schema, then reports (a result with markup in
it, which the page must show as text). ``flaky`` fails until the file named by its input
``flag`` exists, so that Retry on the page lets it through. Loaded by file reference by the
test and by the ``longtask serve`` process, which runs the steps after each action.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from longtask import LongTask, Retry, Stage, StepContext, function_step, wait_for


class Deploy(BaseModel):
    env: Literal["staging", "prod"]
    build: int


#: a result value with markup: shown as text on the page, never as HTML
MARKUP = '<img src=x id="injected"> & <b>bold</b>'


@function_step
def announce(ctx: StepContext) -> dict[str, Any]:
    got = ctx.result("deployed", Deploy)
    return {"env": got.env, "build": got.build, "note": MARKUP}


deploy = LongTask(
    name="page_deploy",
    version="1",
    stages=[
        Stage("wait", [wait_for("deployed", schema=Deploy)]),
        Stage("announce", [announce]),
    ],
)


@function_step(retry=Retry(max_attempts=1))
def fetch(ctx: StepContext) -> str:
    if not Path(ctx.inputs["flag"]).exists():
        raise ValueError("the upstream is down")
    return "fetched"


@function_step
def store(ctx: StepContext) -> str:
    return f"stored {ctx.result('fetch')}"


flaky = LongTask(
    name="page_flaky",
    version="1",
    stages=[Stage("fetch", [fetch]), Stage("store", [store])],
)
