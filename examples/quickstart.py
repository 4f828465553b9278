"""Quickstart: three stages, a parallel stage, and a step that reads its dependencies.

longtask run examples/quickstart.py:task --input '{"topic": "durable agents"}'
longtask status <thread>
"""

from __future__ import annotations

from pydantic import BaseModel

from longtask import LongTask, Stage, StepContext, function_step


class Inputs(BaseModel):
    topic: str = "durable execution"
    words: int = 3


class Outline(BaseModel):
    title: str
    sections: list[str]


@function_step
def outline(ctx: StepContext) -> Outline:
    topic = ctx.inputs.topic
    return Outline(
        title=f"Notes on {topic}",
        sections=[f"{topic}: part {i + 1}" for i in range(ctx.inputs.words)],
    )


@function_step
def research(ctx: StepContext) -> dict[str, int]:
    plan = ctx.result("outline", Outline)
    return {section: len(section) for section in plan.sections}


@function_step
def examples(ctx: StepContext) -> list[str]:
    plan = ctx.result("outline", Outline)
    return [f"example for {section}" for section in plan.sections]


@function_step
def write(ctx: StepContext) -> str:
    plan = ctx.result("outline", Outline)
    facts = ctx.result("research")
    samples = ctx.result("examples")
    lines = [f"# {plan.title}"]
    for section, sample in zip(plan.sections, samples, strict=True):
        lines.append(f"## {section} ({facts[section]} chars)\n{sample}")
    return "\n".join(lines)


task = LongTask(
    name="quickstart",
    version="1",
    inputs=Inputs,
    stages=[
        Stage("plan", [outline]),
        # research and examples have no dependency on each other: they run in parallel
        Stage("gather", [research, examples]),
        Stage("report", [write]),
    ],
)
