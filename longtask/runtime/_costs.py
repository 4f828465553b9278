"""The Runner's cost methods: a thread's usage, threads listed with their cost and age, the
cost chart, and the report of a thread."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from longtask.runtime._base import RunnerBase
from longtask.runtime._usage import ThreadUsage, read_usage
from longtask.store import ThreadRecord


class ThreadCost(BaseModel):
    """A thread as ``longtask ls`` lists it: its record's summary, cost and age."""

    thread_id: str
    task_name: str
    task_version: str
    status: str
    created_at: datetime
    updated_at: datetime
    #: seconds since the thread was created
    age: float
    cost: float = 0.0
    tokens: int = 0
    tool_calls: int = 0
    record: dict[str, Any] = {}

    def to_json(self) -> dict[str, Any]:
        """The record's JSON (as ``ls --json`` printed it before) with cost and age."""
        return {
            **self.record,
            "cost": self.cost,
            "tokens": self.tokens,
            "tool_calls": self.tool_calls,
            "age": self.age,
        }


def report_name(thread_id: str, format: str) -> str:
    """A file name for a thread's report in the current directory."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", thread_id).strip("._") or "thread"
    return f"{safe}-report.{format}"


class CostMixin(RunnerBase):
    """Usage, cost listing, charts and reports."""

    def usage(self, thread_id: str) -> ThreadUsage:
        """What the thread used in all (tokens, cost, tool and model calls, wall time) and
        what its budget has left; the same as ``status(thread_id).usage``."""
        rec = self._thread(thread_id)
        declared = {s["name"] for st in rec.definition["stages"] for s in st["steps"]}
        return read_usage(self.db.store, rec, declared)[0]

    def threads_with_cost(
        self,
        limit: int = 100,
        status: str | None = None,
        sort: str = "updated",
        task: str | None = None,
    ) -> list[ThreadCost]:
        """Threads (with ``status``, of the task named ``task``) with what they cost and
        their age: ``sort`` is ``updated`` (most recently updated first), ``cost`` (most
        expensive first) or ``age`` (oldest first). Two queries, whatever the number of
        threads."""
        records: list[ThreadRecord] = self.db.store.list_threads(
            limit=limit, status=status, sort=sort, task=task
        )
        costs = self.db.store.costs_of([r.thread_id for r in records])
        now = datetime.now(UTC)
        out = []
        for r in records:
            cost, tokens, tool_calls = costs.get(r.thread_id, (0.0, 0, 0))
            out.append(
                ThreadCost(
                    thread_id=r.thread_id,
                    task_name=r.task_name,
                    task_version=r.task_version,
                    status=r.status,
                    created_at=r.created_at,
                    updated_at=r.updated_at,
                    age=round(max((now - r.created_at).total_seconds(), 0.0), 3),
                    cost=round(cost, 8),
                    tokens=tokens,
                    tool_calls=tool_calls,
                    record=r.to_json(),
                )
            )
        return out

    def cost_chart(self, thread_id: str) -> Any:
        """A matplotlib figure of the thread's cumulative cost and tokens over time (from its
        ``model.call`` events), waits shaded as on ``timeline``."""
        from longtask.runtime._plots import cost_figure

        rec = self._thread(thread_id)
        events = self.db.store.events(thread_id)
        return cost_figure(events, f"{rec.task_name} · {thread_id}")

    def report_document(self, thread_id: str, format: str = "html", *, charts: bool = True) -> str:
        """The thread's report as text, charts embedded (HTML: base64 PNG; Markdown: PNG
        data URIs, which some Markdown viewers do not show): for a response, not a file."""
        from longtask.runtime._report import data_uris, format_of, html_document, markdown

        fmt = format_of(None, format)
        document = self._report(thread_id, charts)
        if fmt == "html":
            return html_document(document)
        return markdown(document, data_uris(document))

    def _report(self, thread_id: str, charts: bool) -> Any:
        from longtask.runtime._report import build

        rec = self._thread(thread_id)
        status = self.status(thread_id)  # type: ignore[attr-defined]
        events = self.db.store.events(thread_id)
        effects = self.db.store.effects(thread_id)
        inputs: Any = None
        if rec.inputs:
            try:
                inputs = self.codec.decode(rec.inputs, strict=False)
            except Exception:  # an input stored as a blob that is gone: show it as stored
                inputs = rec.inputs
        if isinstance(inputs, BaseModel):
            inputs = inputs.model_dump(mode="json")
        return build(rec, status, events, effects, inputs=inputs, charts=charts)

    def report(
        self,
        thread_id: str,
        path: str | Path | None = None,
        format: str | None = None,
        *,
        charts: bool = True,
    ) -> Path:
        """Write the thread's report (Markdown or HTML, by ``format`` or else ``path``'s
        extension) and return its path. Without ``path``: ``<thread>-report.md`` (or
        ``.html``) in the current directory. Markdown charts go to ``<name>-files/``
        beside it; HTML embeds them. Without matplotlib, no charts (the report says so)."""
        from longtask.runtime._report import format_of, write

        target = Path(path) if path is not None else None
        fmt = format_of(target, format)
        document = self._report(thread_id, charts)
        target = target or Path(report_name(thread_id, fmt))
        write(document, target, fmt)
        return target
