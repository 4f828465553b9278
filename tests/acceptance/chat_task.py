"""A chat task for the useStream browser test (``test_usestream.py``): what a chat UI on
LangGraph's ``useStream`` starts with ``submit({messages: [{type: "human", content}]})``.

``chat_agent``: the agent ``answer`` answers the first chat message (the run's input
``messages``), calling the read-only tool ``weather`` once; the approval ``send_answer``
(alice) holds the answer; ``report`` says what was sent and who approved it.
"""

from __future__ import annotations

from longtask import LongTask, Prompt, Stage, StepContext, agent_step, approval, function_step

CITY = "Lyon"
FORECAST = f"sunny in {CITY}, 21 C"


def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}, 21 C"


answer = agent_step(
    "answer",
    # The chat input is the run's input: {"messages": [{"type": "human", "content": ...}]}.
    prompt=Prompt(name="chat", version="1", template="{inputs[messages][0][content]}"),
    tools=[weather],
    read_only_tools=["weather"],
)


@function_step
def report(ctx: StepContext) -> str:
    return f"sent: {ctx.result('answer')} (approved by {ctx.result('send_answer')['by']})"


task = LongTask(
    "chat_agent",
    stages=[
        Stage("chat", [answer]),
        Stage(
            "approve",
            [
                approval(
                    "send_answer",
                    plan=lambda ctx: {"answer": ctx.result("answer")},
                    approvers=["alice"],
                )
            ],
        ),
        Stage("report", [report]),
    ],
)
