"""This module provides a tool for the agent (the template's is a web search; this one
answers from a table, so that the tests call nothing outside 127.0.0.1)."""

from collections.abc import Callable
from typing import Any

from react_agent.notes import hold, note


def search(query: str) -> dict[str, Any]:
    """Search for general facts about a topic."""
    note("search start")
    hold()
    note("search end")
    return {"query": query, "results": [f"facts about {query}"]}


TOOLS: list[Callable[..., Any]] = [search]
