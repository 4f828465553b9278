"""A plain LangGraph chat graph whose node calls a LangChain chat model (``ChatOpenAI`` at
``$OPENAI_BASE_URL``, the tests' scripted server), for ``test_token_streams.py``: its answer
streams token by token when a client streams messages."""

from __future__ import annotations

from typing import Any

from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph


def answer(state: MessagesState) -> dict[str, Any]:
    model = ChatOpenAI(model="gpt-4o-mini", max_retries=0)
    return {"messages": [model.invoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("answer", answer)
builder.add_edge(START, "answer")
builder.add_edge("answer", END)
graph = builder.compile(name="Token Agent")
