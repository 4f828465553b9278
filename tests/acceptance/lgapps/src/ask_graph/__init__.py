"""A graph that asks a person before it finishes (its own ``interrupt()``)."""

from ask_graph.graph import graph

__all__ = ["graph"]
