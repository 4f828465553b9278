"""The agent of ``test_graph_tool_counts.py`` (imported, and served from a langgraph.json
by file reference): LangChain's ``create_agent`` with a ``look`` tool and a ``delegate``
tool that runs a sub-agent of its own inside the tool (as a deep agent's ``task`` tool
runs its sub-agent), and the scripted model's replies."""

from __future__ import annotations

from typing import Any

from fakes import Reply
from langchain_core.tools import tool


@tool
def look(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def _model() -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="gpt-4o-mini", max_retries=0)


@tool
def delegate(question: str) -> str:
    """Ask the researcher sub-agent a question."""
    from langchain.agents import create_agent

    # run inside the tool, as a deep agent's `task` tool runs its sub-agent
    researcher = create_agent(_model(), [look])
    done = researcher.invoke({"messages": [{"role": "user", "content": question}]})
    return str(done["messages"][-1].content)


def agent() -> Any:
    from langchain.agents import create_agent

    return create_agent(_model(), [look, delegate])


SCRIPT = {
    # the sub-agent: one tool call, then its answer
    "Sub question": [
        Reply.tool_calls([("look", {"topic": "sub"})], usage=(10, 5)),
        Reply.text("sub found it", usage=(10, 5)),
    ],
    # the parent: one call, then two in one turn (one of them the sub-agent), then done
    "Plan it.": [
        Reply.tool_calls([("look", {"topic": "a"})], usage=(100, 50)),
        Reply.tool_calls(
            [("look", {"topic": "b"}), ("delegate", {"question": "Sub question"})],
            usage=(100, 50),
        ),
        Reply.text("done", usage=(100, 50)),
    ],
}
