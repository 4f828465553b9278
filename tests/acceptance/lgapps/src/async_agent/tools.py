"""This module provides a tool for the agent (the template's is a web search; this one
answers from a table, so that the tests call nothing outside 127.0.0.1). A coroutine, as the
template's is: the graph runs only on LangGraph's async API."""

import asyncio
from collections.abc import Callable
from typing import Any

from react_agent.notes import hold, note


async def search(query: str) -> dict[str, Any]:
    """Search for general facts about a topic."""
    note("search start")
    await asyncio.to_thread(hold)
    note("search end")
    return {"query": query, "results": [f"facts about {query}"]}


TOOLS: list[Callable[..., Any]] = [search]
