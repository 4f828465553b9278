"""A weekly report LongTask for the browser test: parse documents (a map step) -> wait for
the outside event ``ci`` -> summarise -> approval of the publish plan -> publish.

Loaded by file reference both by the test and by the ``longtask serve`` process, which runs
the steps after the approval.
"""

from __future__ import annotations

from typing import Any

from longtask import (
    ItemContext,
    LongTask,
    Stage,
    StepContext,
    approval,
    function_step,
    map_step,
    wait_for,
)

DOCUMENTS = [f"notes/2030-w{week:02d}.md" for week in range(1, 9)]
TARGET = "s3://reports/weekly-2030-08.md"


def documents(ctx: StepContext) -> list[str]:
    return DOCUMENTS


@map_step(over=documents, max_parallel=4)
def parse(ctx: ItemContext, path: str) -> dict[str, Any]:
    return {"file": path, "words": 200 + 17 * ctx.item_index}


@function_step
def summarise(ctx: StepContext) -> dict[str, int]:
    parsed = ctx.result("parse")
    return {"documents": len(parsed), "words": sum(p["words"] for p in parsed)}


#: a multi-line string in the plan, as ``git diff --stat`` prints it
DIFF_STAT = """ reports/weekly-2030-08.md | 42 ++++++++++++++++++++
 reports/index.md          |  1 +
 2 files changed, 43 insertions(+)"""
REPORT = "# Weekly report 2030-08\n\n8 documents.\n"


def publish_plan(ctx: StepContext) -> dict[str, Any]:
    return {"target": TARGET, **ctx.result("summarise"), "ci": ctx.result("ci"), "diff": DIFF_STAT}


@function_step
def publish(ctx: StepContext) -> str:
    ctx.artifact("report.md", REPORT, media_type="text/markdown")
    return f"published {TARGET} (approved by {ctx.result('approve_publish')['by']})"


task = LongTask(
    name="weekly_report",
    version="1",
    stages=[
        Stage("gather", [parse]),
        Stage("check", [wait_for("ci")]),
        Stage("review", [summarise]),
        Stage("approve", [approval("approve_publish", plan=publish_plan, approvers=["alice"])]),
        Stage("publish", [publish]),
    ],
)


@function_step
def draft(ctx: StepContext) -> str:
    ctx.artifact("draft.md", "# draft\n", media_type="text/markdown")
    raise ValueError("the draft does not parse")


#: a thread that fails after storing an artifact (the page of a failed thread)
broken = LongTask(name="broken_report", version="1", stages=[Stage("write", [draft])])
