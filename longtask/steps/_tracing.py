"""OpenTelemetry spans and LangGraph ``custom`` stream parts, both optional.

OpenTelemetry is imported on the first span, and only if installed (the ``otel`` extra):
without it every span here is a no-op and nothing is imported. With the API but no SDK
configured, the API's own no-op tracer applies.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from langgraph.errors import GraphBubbleUp

#: the tracer, once looked up; False when OpenTelemetry is not installed
_tracer: Any = None
#: OpenTelemetry's ``trace`` module, once imported
_trace: Any = None


def tracer() -> Any:
    """LongTask's OpenTelemetry tracer, or None without OpenTelemetry or while no tracer
    provider is set (the API alone makes only no-op spans, which cost a step some tens of
    microseconds for nothing)."""
    global _tracer, _trace
    if _tracer is None:
        try:
            from opentelemetry import trace
        except ImportError:
            _tracer = False
        else:
            _trace = trace
            # A proxy: it follows a tracer provider set after this call.
            _tracer = trace.get_tracer("longtask")
    if _tracer is False:
        return None
    provider = _trace.get_tracer_provider()
    if isinstance(provider, _trace.ProxyTracerProvider | _trace.NoOpTracerProvider):
        return None
    return _tracer


def _attributes(attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {f"longtask.{k}": v for k, v in attrs.items() if v is not None}


@contextlib.contextmanager
def span(name: str, **attrs: Any) -> Iterator[Any]:
    """A span around the block, current inside it (None without OpenTelemetry). A pause
    (LangGraph's interrupt) ends it as paused, not as an error."""
    t = tracer()
    if t is None:
        yield None
        return
    from opentelemetry.trace import Status, StatusCode

    with t.start_as_current_span(
        name, attributes=_attributes(attrs), record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except GraphBubbleUp:
            current.set_attribute("longtask.paused", True)
            raise
        except BaseException as exc:
            current.record_exception(exc)
            current.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:500]))
            raise


def start_span(name: str, **attrs: Any) -> Any:
    """A span that is not made current (None without OpenTelemetry): the caller ends it,
    and makes it current with ``activate`` around each piece of work."""
    t = tracer()
    return None if t is None else t.start_span(name, attributes=_attributes(attrs))


def activate(current: Any) -> contextlib.AbstractContextManager[Any]:
    """Make ``current`` (from start_span) the current span inside the block."""
    if current is None:
        return contextlib.nullcontext()
    from opentelemetry.trace import use_span

    return use_span(current, end_on_exit=False)


def set_attributes(**attrs: Any) -> None:
    """Set attributes on the current span, if any."""
    if tracer() is None:
        return
    from opentelemetry.trace import get_current_span

    get_current_span().set_attributes(_attributes(attrs))


#: the stream writer of the task's node running here: an agent's own graph (a subgraph)
#: has a writer of its own, whose parts a caller sees only with ``subgraphs=True``
_node_writer: contextvars.ContextVar[Callable[[Any], None] | None] = contextvars.ContextVar(
    "longtask_node_writer", default=None
)


@contextlib.contextmanager
def node_writer() -> Iterator[None]:
    """Inside the block, ``write_custom`` writes to this node's stream (the task graph's),
    also from the subgraphs and threads the node starts."""
    from langgraph.config import get_stream_writer

    try:
        writer = get_stream_writer()
    except RuntimeError:  # outside a runnable context
        yield
        return
    token = _node_writer.set(writer)
    try:
        yield
    finally:
        _node_writer.reset(token)


def write_custom(part: Mapping[str, Any]) -> None:
    """Send ``part`` to LangGraph's ``custom`` stream mode when called inside a node of a
    streaming run; elsewhere (no run) it does nothing."""
    writer = _node_writer.get()
    if writer is None:
        from langgraph.config import get_stream_writer

        try:
            writer = get_stream_writer()
        except RuntimeError:  # outside a runnable context
            return
    writer(dict(part))


def end_span(current: Any, exc: BaseException | None) -> None:
    """End ``current`` (from start_span), as failed with ``exc`` if given."""
    if current is None:
        return
    if exc is not None and not isinstance(exc, GraphBubbleUp):
        from opentelemetry.trace import Status, StatusCode

        current.record_exception(exc)
        current.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:500]))
    current.end()


def trace_carrier() -> dict[str, str] | None:
    """The current trace context as W3C headers, to carry into a worker's job (None
    without OpenTelemetry or outside a span)."""
    if tracer() is None:
        return None
    from opentelemetry.propagate import inject

    headers: dict[str, str] = {}
    inject(headers)
    return headers or None


@contextlib.contextmanager
def remote_parent(headers: Mapping[str, str] | None) -> Iterator[None]:
    """Inside the block, spans continue the trace ``headers`` (from trace_carrier) name."""
    if not headers or tracer() is None:
        yield
        return
    from opentelemetry import context
    from opentelemetry.propagate import extract

    token = context.attach(extract(dict(headers)))
    try:
        yield
    finally:
        context.detach(token)
