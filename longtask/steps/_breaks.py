"""Stops a run asks for: a served graph's run with ``interrupt_before`` / ``interrupt_after``
(as LangGraph's server takes them) stops its graph there for that run only.

The process carrying the run out sets them around the run (``breaking``); a graph step's
node reads them (``run_breaks``) and calls its graph with them. The stop is a pause of the
thread as a stop the graph was compiled with is, and a run without input continues it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Any

#: (interrupt_before, interrupt_after) of the run being carried out on this thread
_BREAKS: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "longtask_run_breaks", default=None
)


@contextlib.contextmanager
def breaking(
    before: str | Sequence[str] | None, after: str | Sequence[str] | None
) -> Iterator[None]:
    """Runs made on this thread inside the block stop their graph steps' graphs before the
    nodes ``before`` and after ``after`` (``"*"``: every node)."""
    given = {
        key: value if value == "*" else list(value or ())
        for key, value in (("interrupt_before", before), ("interrupt_after", after))
        if value
    }
    token = _BREAKS.set(given or None)
    try:
        yield
    finally:
        _BREAKS.reset(token)


def run_breaks() -> dict[str, Any]:
    """``interrupt_before`` / ``interrupt_after`` keywords for the graph's call ({}: none)."""
    return dict(_BREAKS.get() or {})
