"""A plain LangGraph graph for the useStream browser test (``test_usestream.py``), served as
it is (``--task usestream_graph.py:graph#chat_graph``): the shape of ``chat_task.py``'s
LongTask written as an app would write it, with no longtask in it. A ReAct loop
(``call_model`` over ChatOpenAI with the read-only tool ``weather``, ``tools``) answers the
chat's message; ``approve`` asks with its own ``interrupt()`` whether to send the answer;
``send`` says what was sent.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from langchain_core.messages import AIMessage, AnyMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import interrupt
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    report: str


def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}, 21 C"


def call_model(state: State) -> dict[str, Any]:
    model = ChatOpenAI(model="gpt-test").bind_tools([weather])
    return {"messages": [model.invoke(state["messages"])]}


def route(state: State) -> Literal["tools", "approve"]:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else "approve"


def approve(state: State) -> dict[str, Any]:
    answer = state["messages"][-1].content
    decision = interrupt({"plan": {"answer": answer}, "approvers": ["alice"]})
    return {"report": f"sent: {answer} ({decision.get('comment')})"}


builder = StateGraph(State)
builder.add_node("call_model", call_model)
builder.add_node("tools", ToolNode([weather]))
builder.add_node("approve", approve)
builder.add_edge(START, "call_model")
builder.add_conditional_edges("call_model", route)
builder.add_edge("tools", "call_model")
builder.add_edge("approve", END)
graph = builder.compile()
