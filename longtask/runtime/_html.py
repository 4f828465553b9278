"""HTML views for notebooks (``_repr_html_``): plain tables, inline styles, escaped text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from longtask.runtime._history import CheckpointState
    from longtask.runtime._views import CheckpointView, ThreadStatus

_MARK = {
    "completed": "✓",
    "skipped": "↷",
    "waiting": "⏸",
    "running": "●",
    "failed": "✗",
    "pending": "○",
}
_COLOUR = {
    "completed": "#2e7d32",
    "skipped": "#757575",
    "waiting": "#00838f",
    "running": "#f9a825",
    "failed": "#c62828",
    "pending": "#9e9e9e",
}
_TABLE = 'style="border-collapse:collapse;font-family:monospace;font-size:13px"'
_CELL = 'style="border:1px solid #ddd;padding:2px 8px;text-align:left;vertical-align:top"'


def _short(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return escape(text if len(text) <= limit else text[: limit - 1] + "…")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th {_CELL}>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td {_CELL}>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table {_TABLE}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def status_html(st: ThreadStatus) -> str:
    rows = []
    for step in st.steps:
        state = f'<span style="color:{_COLOUR[step.state]}">{_MARK[step.state]} {step.state}</span>'
        extra = []
        if step.items_total is not None:
            extra.append(f"{step.items_done}/{step.items_total} items")
        if step.fix_rounds:
            extra.append(f"fix round {step.fix_rounds}")
        rows.append(
            [
                escape(step.stage),
                escape(step.name),
                escape(step.kind),
                state,
                escape(", ".join(extra)),
            ]
        )
    title = (
        f"<b>{escape(st.task_name)}</b> v{escape(st.task_version)} · {escape(st.thread_id)} · "
        f"<b>{escape(st.status)}</b> · {st.progress:.0%}"
    )
    waiting = "".join(
        f"<div>waiting for {escape(w.get('kind', ''))}: {escape(str(w.get('step')))} "
        f"{escape(str(w.get('reason') or ''))}</div>"
        for w in st.waiting
    )
    error = (
        f'<div style="color:#c62828">error in {escape(str(st.error.get("step")))}: '
        f"{escape(str(st.error.get('message')))}</div>"
        if st.error
        else ""
    )
    table = _table(["stage", "step", "kind", "state", ""], rows)
    return f"<div>{title}{table}{waiting}{error}</div>"


def history_html(views: Sequence[CheckpointView]) -> str:
    rows = [
        [
            escape(v.checkpoint_id),
            escape(str(v.parent_id or "")),
            escape(str(v.step)),
            escape(v.source or ""),
            escape((v.created_at or "")[:19].replace("T", " ")),
            escape(", ".join(v.completed)),
            escape(", ".join(v.stages)),
            f"{v.done}/{v.total}",
        ]
        for v in views
    ]
    header = ["checkpoint", "parent", "step", "source", "time", "completed", "stage", "done"]
    return _table(header, rows)


def checkpoint_html(cs: CheckpointState) -> str:
    rows = [[escape(k), _short(v)] for k, v in cs.results.items()]
    parts = [
        f"<div><b>checkpoint</b> {escape(cs.checkpoint_id)} (parent "
        f"{escape(str(cs.parent_id))}) · {escape(str(cs.created_at or ''))}</div>",
        _table(["step", "result"], rows),
        f"<div>next: {escape(', '.join(cs.next) or 'nothing (end)')}</div>",
    ]
    for i in cs.interrupts:
        parts.append(f"<div>interrupt at {escape(i['node'])}: {_short(i['value'])}</div>")
    return "".join(parts)


class HistoryList(list["CheckpointView"]):
    """A list of checkpoint views that shows as a table in a notebook."""

    def _repr_html_(self) -> str:
        return history_html(self)
