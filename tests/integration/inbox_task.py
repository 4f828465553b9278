"""The task of the Agent Inbox test (``test_agent_inbox.py``), loaded by file reference:
an agent step whose ``deploy`` tool needs approval, an approval step (alice), a wait for
``ci``, and ``finish``. The tool appends each environment it deploys to to the file
``$LT_INBOX_DEPLOYED``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from longtask import LongTask, Stage, StepContext, approval, function_step, wait_for
from longtask.model import agent_step


def deploy(env: str) -> str:
    """Deploy the service to an environment."""
    with Path(os.environ["LT_INBOX_DEPLOYED"]).open("a") as f:
        f.write(env + "\n")
    return f"deployed to {env}"


class Ci(BaseModel):
    status: Literal["passed", "failed"]
    url: str = ""


@function_step
def finish(ctx: StepContext) -> str:
    return f"{ctx.result('release')} / {ctx.result('ci', Ci).status}"


GATED = {"deploy": True}

INBOX = LongTask(
    "inbox",
    stages=[
        Stage(
            "release",
            [
                agent_step(
                    "release", prompt="Ship it.", tools=[deploy], tool_approvals={"deploy": True}
                )
            ],
        ),
        Stage("approve", [approval("ok", plan=lambda ctx: {"ship": True}, approvers=["alice"])]),
        Stage("ci", [wait_for("ci", schema=Ci)]),
        Stage("done", [finish]),
    ],
)
