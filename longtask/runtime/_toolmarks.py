"""Tool marks of a served graph, from its entry in a langgraph.json (or longtask.json):

    "graphs": {"agent": {"path": "./agent.py:graph",
                         "tools": {"book_flight": "./bookings.py:find_booking",
                                   "lookup_flight": "read_only", "*": "idempotent"}}}

A mark is one of ``model.TOOL_MARKS`` or a reference to a reconcile function (``file.py:fn``,
relative to the config file, or ``package.module:fn``). The reference a served graph's
threads record names the config file (``path:graph#agent@/abs/langgraph.json``), so a
worker that loads it reads the same marks.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from longtask.errors import TaskRefError
from longtask.model._graph import TOOL_MARKS, tool_mark_problems

__all__ = ["config_tools", "tool_marks"]


def config_tools(config: Path, graph_id: str) -> dict[str, str] | None:
    """The ``tools`` of ``graph_id``'s entry in ``config``, unresolved (None if it has none)."""
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError) as exc:
        raise TaskRefError(
            f"cannot read the tool marks of {graph_id!r} from {config}: {exc}"
        ) from exc
    table = data.get("tasks", data.get("graphs")) if isinstance(data, dict) else None
    entry = table.get(graph_id) if isinstance(table, dict) else None
    tools = entry.get("tools") if isinstance(entry, dict) else None
    if tools is None:
        return None
    if not isinstance(tools, dict) or not all(isinstance(v, str) for v in tools.values()):
        raise TaskRefError(
            f'{config}: "tools" of graph {graph_id!r} must map tool names (or "*") to '
            f"{', '.join(map(repr, TOOL_MARKS))} or a reconcile function's reference "
            '("./file.py:find_booking")'
        )
    return dict(tools)


def tool_marks(
    config: Path, graph_id: str, load_file: Callable[[Path], ModuleType]
) -> dict[str, Any] | None:
    """The marks of ``graph_id``'s tools in ``config``, reconcile references imported (a
    file's with ``load_file``, as task references load theirs); every problem reported at
    once."""
    tools = config_tools(config, graph_id)
    if tools is None:
        return None
    out: dict[str, Any] = {}
    problems = tool_mark_problems(f"{config}: graph {graph_id!r}", {})
    for name, mark in tools.items():
        if mark in TOOL_MARKS:
            out[name] = mark
            continue
        target, sep, attr = mark.rpartition(":")
        if not sep or not target or not attr:
            problems.append(
                f"{config}: graph {graph_id!r}: tools[{name!r}] is {mark!r}; use one of "
                f"{', '.join(map(repr, TOOL_MARKS))} or a reconcile function's reference "
                '("./file.py:find_booking" or "package.module:find_booking")'
            )
            continue
        try:
            if target.endswith(".py") or "/" in target:
                path = Path(target)
                path = path if path.is_absolute() else config.resolve().parent / path
                module = load_file(path)
            else:
                module = importlib.import_module(target)
            fn = getattr(module, attr)
        except Exception as exc:
            problems.append(
                f"{config}: graph {graph_id!r}: cannot load tools[{name!r}] = {mark!r}: "
                f"{type(exc).__name__}: {exc}"
            )
            continue
        if not callable(fn):
            problems.append(
                f"{config}: graph {graph_id!r}: tools[{name!r}] = {mark!r} is not a function"
            )
            continue
        out[name] = fn
    problems.extend(tool_mark_problems(f"{config}: graph {graph_id!r}", out))
    if problems:
        raise TaskRefError("; ".join(problems))
    return out
