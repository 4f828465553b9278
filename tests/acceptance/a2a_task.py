"""A chat task with no pause for the A2A test (``test_a2a.py``): the agent step ``answer``
(a LangChain agent over ChatOpenAI, one read-only tool) answers the chat's first message.
``lgdiff_task.py``'s ``chat`` is the one with an approval."""

from __future__ import annotations

from lgdiff_task import Chat, lookup

from longtask import LongTask, Prompt, Stage, agent_step

answer = agent_step(
    "answer",
    prompt=Prompt(name="ask", template="{inputs.messages[0][content]}"),
    tools=[lookup],
    read_only_tools=["lookup"],
)

task = LongTask("ask", inputs=Chat, stages=[Stage("think", [answer])])
