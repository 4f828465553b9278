"""A thread's report (Markdown or HTML, with its charts) and its charts alone: the timeline
(a Gantt chart of its steps) and the cost over time. Read from its record, status, events
and effect ledger; nothing is written to the database."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from longtask.checkpointers import Database
    from longtask.runtime import Reads
    from longtask.store import ValueCodec


def report_name(thread_id: str, format: str) -> str:
    """A file name for a thread's report in the current directory."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", thread_id).strip("._") or "thread"
    return f"{safe}-report.{format}"


class Reports:
    """Reports and charts of one thread: ``reads`` gives its record and status, ``codec``
    decodes its inputs."""

    def __init__(self, db: Database, codec: ValueCodec, reads: Reads) -> None:
        self.db = db
        self.codec = codec
        self._reads = reads

    def timeline(self, thread_id: str) -> Any:
        """A matplotlib figure of the thread over time (a Gantt chart): one row per step,
        grouped by stage, a bar per run coloured by its outcome (failed runs, retries and
        pauses show), the time spent waiting for a person or an outside event shaded."""
        from longtask.ops._plots import timeline_figure

        rec = self._reads.thread(thread_id)
        stages = {s["name"]: st["name"] for st in rec.definition["stages"] for s in st["steps"]}
        events = self.db.store.events(thread_id)
        return timeline_figure(events, list(stages), f"{rec.task_name} · {thread_id}", stages)

    def cost_chart(self, thread_id: str) -> Any:
        """A matplotlib figure of the thread's cumulative cost and tokens over time (from its
        ``model.call`` events), waits shaded as on ``timeline``."""
        from longtask.ops._plots import cost_figure

        rec = self._reads.thread(thread_id)
        events = self.db.store.events(thread_id)
        return cost_figure(events, f"{rec.task_name} · {thread_id}")

    def report_document(self, thread_id: str, format: str = "html", *, charts: bool = True) -> str:
        """The thread's report as text, charts embedded (HTML: base64 PNG; Markdown: PNG
        data URIs, which some Markdown viewers do not show): for a response, not a file."""
        from longtask.ops._report import data_uris, format_of, html_document, markdown

        fmt = format_of(None, format)
        document = self._report(thread_id, charts)
        if fmt == "html":
            return html_document(document)
        return markdown(document, data_uris(document))

    def _report(self, thread_id: str, charts: bool) -> Any:
        from longtask.ops._report import build

        rec = self._reads.thread(thread_id)
        status = self._reads.status(thread_id)
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
        from longtask.ops._report import format_of, write

        target = Path(path) if path is not None else None
        fmt = format_of(target, format)
        document = self._report(thread_id, charts)
        target = target or Path(report_name(thread_id, fmt))
        write(document, target, fmt)
        return target
