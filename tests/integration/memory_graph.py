"""A plain LangGraph graph that keeps memories in LangGraph's store, reaching it each way
LangGraph's server offers (for ``test_graph_store.py``): ``runtime.store`` in a sync node,
an injected ``store`` parameter, and ``get_store()`` with the async API in an async node.
Each turn stores what was said (keyed by itself) in the user's namespace, ``(user,
"memories")``, and answers how many memories the store holds there."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore


class Chat(TypedDict, total=False):
    user: str
    said: Annotated[list[str], operator.add]
    recalled: int
    seen: list[str]


def remember(state: Chat, runtime: Runtime) -> dict[str, Any]:
    assert runtime.store is not None, "the graph got no store"
    last = state["said"][-1]
    runtime.store.put((state["user"], "memories"), last, {"text": last})
    return {}


def recall(state: Chat, *, store: BaseStore) -> dict[str, Any]:
    return {"recalled": len(store.search((state["user"], "memories")))}


async def look(state: Chat) -> dict[str, Any]:
    items = await get_store().asearch((state["user"], "memories"))
    return {"seen": sorted(i.value["text"] for i in items)}


builder = StateGraph(Chat)
builder.add_node("remember", remember)
builder.add_node("recall", recall)
builder.add_node("look", look)
builder.add_edge(START, "remember")
builder.add_edge("remember", "recall")
builder.add_edge("recall", "look")
builder.add_edge("look", END)
graph = builder.compile()
