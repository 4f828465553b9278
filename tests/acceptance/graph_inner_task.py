"""A graph step over a LangChain agent whose tool asks a model itself before its outside
write, for test_graph_inner_kill.py: ``send_summary`` has ``ChatOpenAI`` summarize the text,
then commits the mail to the outside database (``deep_agent_task``'s, with the
``tool_call_id``) and, in the first process (``$LT_KILL_AT`` ``send_summary:after``), is
SIGKILLed right after that commit. A model call inside a tool is no sub-agent: nothing of
it is checkpointed, so the cut-off call must still be settled as its mark says (a person,
here), not run again."""

from __future__ import annotations

from typing import Annotated, Any

import deep_agent_task as d
from langchain_core.tools import InjectedToolCallId, tool

from longtask import LongTask, Stage, graph_step

ASK = "Mail a summary of the report."
SUMMARIZE = "Summarize: the report."


@tool
def send_summary(text: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Summarize a text and mail the summary."""
    from langchain_openai import ChatOpenAI

    summary = ChatOpenAI(model="gpt-4o-mini", max_retries=0).invoke(SUMMARIZE).content
    return d.commit("send_summary", tool_call_id, {"text": text, "summary": summary})


def agent() -> Any:
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    return create_agent(ChatOpenAI(model="gpt-4o-mini", max_retries=0), [send_summary])


def script(request: Any) -> Any:
    from fakes import Reply

    if request.first_text("user") == SUMMARIZE:
        return Reply.text("All good.")
    return [Reply.tool_calls([("send_summary", {"text": "the report"})]), Reply.text("Sent.")][
        request.turn
    ]


task = LongTask(
    name="graph-inner",
    stages=[
        Stage(
            "s",
            [
                graph_step(
                    "mail",
                    agent,
                    input=lambda ctx: {"messages": [{"role": "user", "content": ASK}]},
                    output=lambda state: state["messages"][-1].content,
                )
            ],
        )
    ],
)
