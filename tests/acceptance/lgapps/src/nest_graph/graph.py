"""A graph with a subgraph: ``research`` (the subgraph) reports its progress on the custom
stream, asks the model for a summary and has a person check it with ``interrupt()``;
``publish`` then ends (held while ``$LGAPPS_HOLD`` names a file). The model is ChatOpenAI
at ``$OPENAI_BASE_URL``."""

from typing import Annotated, Any

from langchain_core.messages import AnyMessage
from langchain_openai import ChatOpenAI
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from react_agent.notes import hold
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    checked: str
    published: bool


def summarize(state: State) -> dict[str, Any]:
    get_stream_writer()({"progress": "summarizing"})
    answer = ChatOpenAI(model="gpt-4o-mini").invoke(state["messages"])
    return {"messages": [answer]}


def check(state: State) -> dict[str, Any]:
    verdict = interrupt({"question": "Is the summary right?"})
    return {"checked": str(verdict)}


research_builder = StateGraph(State)
research_builder.add_node("summarize", summarize)
research_builder.add_node("check", check)
research_builder.add_edge(START, "summarize")
research_builder.add_edge("summarize", "check")
research_builder.add_edge("check", END)
research = research_builder.compile()


def publish(state: State) -> dict[str, Any]:
    get_stream_writer()({"progress": "publishing"})
    hold()
    return {"published": True}


builder = StateGraph(State)
builder.add_node("research", research)
builder.add_node("publish", publish)
builder.add_edge(START, "research")
builder.add_edge("research", "publish")
builder.add_edge("publish", END)
graph = builder.compile()
