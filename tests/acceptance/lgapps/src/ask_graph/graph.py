"""Draft an answer, ask a person to review it with ``interrupt()``, then finish."""

from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from react_agent.notes import hold, note
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    topic: str
    draft: str
    review: str
    final: str


def draft(state: State) -> dict[str, Any]:
    note("draft start")
    hold()
    note("draft end")
    return {"draft": f"a note on {state['topic']}"}


def ask(state: State) -> dict[str, Any]:
    note("ask start")
    review = interrupt({"question": "Is the draft good?", "draft": state["draft"]})
    note("ask end")
    return {"review": str(review)}


def finish(state: State) -> dict[str, Any]:
    note("finish start")
    return {"final": f"{state['draft']} ({state['review']})"}


builder = StateGraph(State)
builder.add_node("draft", draft)
builder.add_node("ask", ask)
builder.add_node("finish", finish)
builder.add_edge(START, "draft")
builder.add_edge("draft", "ask")
builder.add_edge("ask", "finish")
builder.add_edge("finish", END)
graph = builder.compile()
