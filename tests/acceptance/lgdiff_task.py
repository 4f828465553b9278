"""The chat task of the differential test (``test_lg_differential.py``), as a LongTask served
by ``longtask serve``: an agent step ``answer`` (a LangChain agent subgraph over ChatOpenAI
with one read-only tool, started from the chat's messages) -> the approval ``approve`` of
its answer -> ``finish``. ``lgdiff_graph.py`` is the same shape as a plain LangGraph graph,
served by LangGraph's own server.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from longtask import LongTask, Prompt, Stage, StepContext, agent_step, approval, function_step


class Chat(BaseModel):
    """What a chat client (Agent Chat UI, useStream) sends: ``{"messages": [...]}``."""

    messages: list[dict[str, Any]]


def lookup(topic: str) -> str:
    """Look a topic up (changes nothing)."""
    return f"facts about {topic}"


answer = agent_step(
    "answer",
    prompt=Prompt(name="answer", template="{inputs.messages[0][content]}"),
    tools=[lookup],
    read_only_tools=["lookup"],
)


def plan(ctx: StepContext) -> dict[str, Any]:
    return {"answer": ctx.result("answer")}


@function_step
def finish(ctx: StepContext) -> str:
    return f"sent: {ctx.result('answer')}"


task = LongTask(
    "chat",
    inputs=Chat,
    stages=[
        Stage("think", [answer]),
        Stage("check", [approval("approve", plan=plan)]),
        Stage("send", [finish]),
    ],
)
