"""Example values of a JSON schema: what an answer looks like, for people and for tools
that offer an editable payload (Agent Inbox)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def schema_example(schema: Mapping[str, Any]) -> Any:
    """A value of the shape ``schema`` describes (a pydantic JSON schema), to show what an
    answer looks like: the first choice of an enum, "..." for a string, and so on."""
    defs = schema.get("$defs", {})

    def example(node: Mapping[str, Any]) -> Any:
        if "$ref" in node:
            return example(defs.get(node["$ref"].rsplit("/", 1)[-1], {}))
        if "default" in node:
            return node["default"]
        if node.get("enum"):
            return node["enum"][0]
        if "const" in node:
            return node["const"]
        for key in ("anyOf", "oneOf", "allOf"):
            if node.get(key):
                return example(node[key][0])
        kind = node.get("type")
        if kind == "object" or "properties" in node:
            return {k: example(v) for k, v in node.get("properties", {}).items()}
        if kind == "array":
            return [example(node["items"])] if node.get("items") else []
        return {"string": "...", "integer": 0, "number": 0, "boolean": True}.get(str(kind))

    return example(schema)
