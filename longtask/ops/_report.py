"""A thread's report: one Markdown or HTML document a person can attach to a ticket.

It reads the whole event log once (a report is a one-off document, unlike ``status``):
the header (task, thread, status, inputs, times, cost, budget left), a Gantt chart of the
steps and a chart of the cost over time, the steps with their durations, attempts, fix
rounds and usage, the approvals and the answers to graphs' interrupts (who decided, what,
when), waits and signals, people's manual actions, the side effects and the errors.

HTML is one self-contained file (the charts embedded as base64 PNG); Markdown links PNG
files written beside it, in ``<name>-files/``. Every value from the thread (names, inputs,
comments, errors) is escaped. Without matplotlib the report is written without charts and
says how to get them.
"""

from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from longtask.errors import InvalidInput, LongTaskError
from longtask.runtime._usage import seconds

if TYPE_CHECKING:
    from longtask.runtime._views import ThreadStatus
    from longtask.store import Effect, Event, ThreadRecord

Format = Literal["md", "html"]
FORMATS: dict[str, Format] = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html"}
NO_PLOTS = "charts need matplotlib: pip install 'langgraph-longtask[notebook]'"
#: longest text of one value (an input, an error, a payload) in a table cell
CELL = 300


def format_of(path: Path | None, format: str | None) -> Format:
    """The report's format: ``format`` if given, else from the file's extension."""
    if format is not None:
        if format not in ("md", "html"):
            raise InvalidInput(f"report format must be md or html, not {format!r}")
        return format  # type: ignore[return-value]
    if path is None:
        return "md"
    found = FORMATS.get(path.suffix.lower())
    if found is None:
        raise InvalidInput(
            f"cannot tell the report format from {path.name!r}: name a .md or .html file, "
            "or give the format (md or html)"
        )
    return found


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    #: said instead of an empty table
    empty: str = "none"


@dataclass
class Report:
    title: str
    #: (label, value) lines of the header
    header: list[tuple[str, str]]
    tables: list[Table]
    #: chart name -> PNG bytes (empty without matplotlib)
    charts: dict[str, bytes]
    #: why there are no charts, if there are none
    no_charts: str | None = None


def _short(value: Any, limit: int = CELL) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _when(value: datetime | str | None) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return str(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _at(epoch: float | None) -> str:
    return "" if epoch is None else _when(datetime.fromtimestamp(epoch, UTC))


def money(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}".rstrip("0").rstrip(".") if value else "0"


def _step_durations(events: list[Event]) -> dict[str, float]:
    from longtask.ops._plots import spans

    out: dict[str, float] = {}
    for step, start, end, outcome in spans(events):
        if outcome != "waiting":  # a pause's own span repeats its step's run
            out[step] = out.get(step, 0.0) + (end - start).total_seconds()
    return out


def build(
    rec: ThreadRecord,
    status: ThreadStatus,
    events: list[Event],
    effects: list[Effect],
    *,
    inputs: Any = None,
    charts: bool = True,
) -> Report:
    """Everything the report says, as plain text values (escaped when rendered)."""
    usage = status.usage
    at = status.current_stage if status.status != "completed" else None
    header: list[tuple[str, str]] = [
        ("task", f"{rec.task_name} v{rec.task_version}"),
        ("thread", rec.thread_id),
        ("status", status.status + (f" (at stage {at})" if at else "")),
        ("progress", f"{status.done}/{len(status.steps)} steps done"),
    ]
    if rec.task_ref:
        header.append(("task reference", rec.task_ref))
    if inputs is not None:
        header.append(("inputs", _short(inputs)))
    finished = rec.status in ("completed", "failed", "cancelled")
    header.append(("started", _when(rec.created_at)))
    header.append(("finished" if finished else "last update", _when(rec.updated_at)))
    header.append(("runs", str(rec.runs)))
    if usage is not None:
        header.append(("wall time", seconds(usage.wall_time)))
        header.append(("cost", money(usage.cost)))
        header.append(("tokens", str(usage.tokens)))
        header.append(("model calls", str(usage.model_calls)))
        header.append(("tool calls", str(usage.tool_calls)))
        limited = [n for n, v in usage.limits.items() if v is not None]
        if limited:
            header.append(
                (
                    "budget left",
                    ", ".join(
                        f"{n.replace('_', ' ')} {_num(usage.left.get(n))} "
                        f"of {_num(usage.limits[n])}"
                        for n in limited
                    ),
                )
            )
        else:
            header.append(("budget", "no limits"))
        if usage.deadline_at is not None:
            header.append(("deadline", _when(usage.deadline_at)))
    if status.error:
        header.append(
            ("error", _short(f"{status.error.get('type')}: {status.error.get('message')}"))
        )
    header.append(("events", str(len(events))))

    durations = _step_durations(events)
    attempts: dict[str, int] = {}
    rounds: dict[str, int] = {}
    for e in events:
        if e.step is None:
            continue
        if e.kind in ("step.started", "step.completed", "step.failed") or (
            e.kind == "step.retry" and "model_call" not in e.data
        ):
            attempts[e.step] = max(attempts.get(e.step, 0), e.attempt or 0)
        elif e.kind == "fix.round":
            rounds[e.step] = rounds.get(e.step, 0) + 1
    steps = Table(
        "Steps",
        [
            "stage",
            "step",
            "kind",
            "status",
            "started",
            "duration",
            "attempts",
            "fix rounds",
            "tokens",
            "cost",
            "model calls",
            "tool calls",
        ],
    )
    for s in status.steps:
        u = s.usage
        ran = u is not None and u["started_at"] is not None
        duration = u["wall_time"] if u is not None and ran else durations.get(s.name)
        steps.rows.append(
            [
                s.stage,
                s.name,
                s.kind,
                s.state,
                _at(u["started_at"]) if u else "",
                seconds(duration),
                str(max(attempts.get(s.name, 0), u["attempts"] if u else 0) or ""),
                str(rounds.get(s.name, s.fix_rounds or 0) or ""),
                str(u["tokens"]) if u else "",
                money(u["cost"]) if u else "",
                str(u["model_calls"]) if u else "",
                str(u["tool_calls"]) if u else "",
            ]
        )
    for name, u in (usage.other if usage else {}).items():
        steps.rows.append(
            [
                "",
                usage.other_label(name) if usage else name,
                "agent" if usage and name in usage.fix_agents else "",
                "",
                _at(u["started_at"]),
                seconds(u["wall_time"]),
                str(u["attempts"] or ""),
                "",
                str(u["tokens"]),
                money(u["cost"]),
                str(u["model_calls"]),
                str(u["tool_calls"]),
            ]
        )

    approvals = Table(
        "Approvals", ["step", "decision", "by", "at", "comment"], empty="no approvals"
    )
    waits = Table(
        "Waits and signals",
        ["step", "kind", "since", "until", "waited", "by", "payload"],
        empty="no waits",
    )
    manual = Table("Actions by people", ["at", "action", "step", "by", "details"], empty="none")
    errors = Table(
        "Errors and retries",
        ["at", "step", "attempt", "class", "outcome", "error"],
        empty="no errors",
    )
    opened: dict[str, Event] = {}
    for e in events:
        if e.kind in ("approval.required", "wait.started") and e.step:
            opened.setdefault(e.step, e)
        elif e.kind == "approval.resolved":
            what = e.data.get("outcome") or ("approved" if e.data.get("approved") else "rejected")
            if e.data.get("tool"):
                what = f"{what} (tool {e.data['tool']})"
            if e.data.get("reused"):
                what += " (an earlier decision, still valid)"
            approvals.rows.append(
                [
                    e.step or "",
                    what,
                    str(e.data.get("by") or ""),
                    _when(e.data.get("at") or e.ts),
                    _short(e.data.get("comment") or ""),
                ]
            )
            _close_wait(waits, opened, e, "approval")
        elif e.kind == "interrupt.resolved":
            # a graph's own interrupt() (a tool review of its middleware too): the answer
            approvals.rows.append(
                [
                    e.step or "",
                    f"answered {_short(e.data.get('value'), 120)}",
                    str(e.data.get("by") or ""),
                    _when(e.ts),
                    "",
                ]
            )
        elif e.kind == "approval.expired":
            approvals.rows.append(
                [e.step or "", f"expired ({e.data.get('reason', '')})", "", _when(e.ts), ""]
            )
        elif e.kind in ("wait.resolved", "wait.expired"):
            _close_wait(waits, opened, e, "wait")
        elif e.kind.startswith("manual."):
            details = {k: v for k, v in e.data.items() if k != "by"}
            manual.rows.append(
                [
                    _when(e.ts),
                    e.kind.removeprefix("manual."),
                    e.step or "",
                    str(e.data.get("by") or ""),
                    _short(details) if details else "",
                ]
            )
        elif e.kind in ("step.failed", "step.retry"):
            errors.rows.append(
                [
                    _when(e.ts),
                    e.step or "",
                    str(e.attempt or ""),
                    str(e.data.get("error_class") or e.data.get("type") or ""),
                    str(e.data.get("outcome") or "failed"),
                    _short(e.data.get("error") or ""),
                ]
            )
        elif e.kind == "step.abandoned":
            # the process running the attempt died (killed, crashed): no error was raised,
            # but the attempt was lost and ran again
            errors.rows.append(
                [
                    _when(e.ts),
                    e.step or "",
                    str(e.attempt or ""),
                    "process died",
                    "abandoned",
                    _short(e.data.get("reason") or ""),
                ]
            )
        elif e.kind == "interrupt.refused":
            # the graph raised on an answer and asks again
            errors.rows.append(
                [
                    _when(e.ts),
                    e.step or "",
                    "",
                    str(e.data.get("type") or ""),
                    "answer refused, asked again",
                    _short(e.data.get("error") or ""),
                ]
            )
        elif e.kind in ("budget.exceeded", "fix.exhausted", "effect.unknown"):
            errors.rows.append([_when(e.ts), e.step or "", "", e.kind, "", _short(e.data)])
    for step, e in opened.items():
        kind = "approval" if e.kind == "approval.required" else "wait"
        waits.rows.append([step, kind, _when(e.ts), "still waiting", "", "", ""])

    effect_table = Table(
        "Side effects", ["name", "step", "key", "status", "calls", "at"], empty="no side effects"
    )
    for ef in effects:
        effect_table.rows.append(
            [ef.name, ef.step, ef.key[:12], ef.status, str(ef.calls), _when(ef.updated_at)]
        )

    drawn: dict[str, bytes] = {}
    why: str | None = None
    if charts:
        drawn, why = _charts(rec, status, events)
    return Report(
        title=f"{rec.task_name} · {rec.thread_id}",
        header=header,
        tables=[steps, approvals, waits, manual, effect_table, errors],
        charts=drawn,
        no_charts=why,
    )


def _num(value: float | None) -> str:
    if value is None:
        return "unlimited"
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


def _close_wait(table: Table, opened: dict[str, Event], e: Event, kind: str) -> None:
    start = opened.pop(e.step or "", None)
    waited = seconds((e.ts - start.ts).total_seconds()) if start is not None else ""
    payload = e.data.get("payload")
    table.rows.append(
        [
            e.step or "",
            kind if e.kind != "wait.expired" else "wait (expired)",
            _when(start.ts) if start else "",
            _when(e.ts),
            waited,
            str(e.data.get("by") or ""),
            _short(payload) if payload is not None else "",
        ]
    )


def _charts(
    rec: ThreadRecord, status: ThreadStatus, events: list[Event]
) -> tuple[dict[str, bytes], str | None]:
    from longtask.ops._plots import cost_figure, png, timeline_figure

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return {}, NO_PLOTS
    stages = {s.name: s.stage for s in status.steps}
    title = f"{rec.task_name} · {rec.thread_id}"
    try:
        charts = {"timeline": png(timeline_figure(events, list(stages), title, stages))}
        # a task that called no model has no cost to draw: no empty chart
        if any(e.kind == "model.call" for e in events):
            charts["cost"] = png(cost_figure(events, title))
        return charts, None
    except LongTaskError as exc:
        return {}, str(exc)


CHART_TITLES = {"timeline": "Timeline", "cost": "Cost over time"}
CHART_TEXT = {
    "timeline": "One row per step, grouped by stage; a bar per run, coloured by how it ended; "
    "time spent waiting for a person or an outside event shaded.",
    "cost": "Cumulative cost (left axis) and tokens (right axis) of the model calls.",
}


# -- Markdown ---------------------------------------------------------------------------------


def _md(value: str) -> str:
    """A table cell's text: no line breaks, no raw HTML, pipes escaped."""
    text = html.escape(" ".join(value.split()), quote=False)
    return re.sub(r"([\\|`*_\[\]])", r"\\\1", text)


def markdown(report: Report, images: dict[str, str]) -> str:
    """The report as Markdown; ``images`` maps chart names to the paths to link."""
    lines = [f"# Report: {_md(report.title)}", ""]
    for label, value in report.header:
        lines.append(f"- **{label}**: {_md(value)}")
    lines.append("")
    if images:
        for name, link in images.items():
            lines += [f"## {CHART_TITLES[name]}", "", CHART_TEXT[name], ""]
            lines += [f"![{name}]({link})", ""]
    elif report.no_charts:
        # our own words (a pip command, whose brackets must stay as they are)
        lines += [f"No charts: {report.no_charts}.", ""]
    for table in report.tables:
        lines += [f"## {table.title}", ""]
        if not table.rows:
            lines += [table.empty, ""]
            continue
        lines.append("| " + " | ".join(table.columns) + " |")
        lines.append("|" + "---|" * len(table.columns))
        lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in table.rows]
        lines.append("")
    lines.append(f"_Written by longtask at {_when(datetime.now(UTC))}._")
    return "\n".join(lines) + "\n"


# -- HTML -------------------------------------------------------------------------------------

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #212121; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f5f5f5; } dl { display: grid; grid-template-columns: max-content auto; }
dt { font-weight: 600; margin-right: 1.5em; } dd { margin: 0; }
img { max-width: 100%; } .note { color: #616161; }
.completed { color: #2e7d32; } .failed { color: #c62828; } .waiting { color: #0277bd; }
"""


def _h(value: str) -> str:
    return html.escape(value, quote=True)


def html_document(report: Report) -> str:
    """The report as one self-contained HTML file (charts as base64 PNG)."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Report: {_h(report.title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Report: {_h(report.title)}</h1>",
        "<dl>",
    ]
    for label, value in report.header:
        out.append(f"<dt>{_h(label)}</dt><dd>{_h(value)}</dd>")
    out.append("</dl>")
    for name, data in report.charts.items():
        encoded = base64.b64encode(data).decode("ascii")
        out.append(f"<h2>{_h(CHART_TITLES[name])}</h2>")
        out.append(f'<p class="note">{_h(CHART_TEXT[name])}</p>')
        out.append(f'<img alt="{_h(name)}" src="data:image/png;base64,{encoded}">')
    if not report.charts and report.no_charts:
        out.append(f'<p class="note">No charts: {_h(report.no_charts)}.</p>')
    for table in report.tables:
        out.append(f"<h2>{_h(table.title)}</h2>")
        if not table.rows:
            out.append(f'<p class="note">{_h(table.empty)}</p>')
            continue
        out.append("<table><thead><tr>")
        out.extend(f"<th>{_h(c)}</th>" for c in table.columns)
        out.append("</tr></thead><tbody>")
        for row in table.rows:
            cells = []
            for column, cell in zip(table.columns, row, strict=True):
                css = f' class="{_h(cell)}"' if column == "status" and cell.isalpha() else ""
                cells.append(f"<td{css}>{_h(cell)}</td>")
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</tbody></table>")
    out.append(f'<p class="note">Written by longtask at {_h(_when(datetime.now(UTC)))}.</p>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def data_uris(report: Report) -> dict[str, str]:
    """The charts as ``data:`` URIs, for a Markdown report that is one file."""
    return {
        name: "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        for name, data in report.charts.items()
    }


def write(report: Report, path: Path, format: Format) -> list[Path]:
    """Write the report to ``path`` (and, for Markdown, its charts beside it in
    ``<name>-files/``); returns every file written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if format == "html":
        path.write_text(html_document(report), encoding="utf-8")
        return [path]
    written: list[Path] = []
    links: dict[str, str] = {}
    if report.charts:
        folder = path.with_name(f"{path.stem}-files")
        folder.mkdir(exist_ok=True)
        for name, data in report.charts.items():
            target = folder / f"{name}.png"
            target.write_bytes(data)
            written.append(target)
            links[name] = f"{folder.name}/{target.name}"
    path.write_text(markdown(report, links), encoding="utf-8")
    return [path, *written]
