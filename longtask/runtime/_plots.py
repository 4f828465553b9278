"""Pictures for notebooks, drawn with matplotlib (no network, no graphviz): a thread's
timeline and a task's graph."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from longtask.errors import LongTaskError

if TYPE_CHECKING:
    from longtask.model import LongTask
    from longtask.store import Event

#: bar colour by how a step's run ended
COLOURS = {
    "completed": "#43a047",
    "failed": "#e53935",
    "running": "#fdd835",
    "skipped": "#9e9e9e",
    "waiting": "#4fc3f7",
}


def _figure(width: float, height: float) -> tuple[Any, Any, Any]:
    """A figure outside pyplot (so Jupyter shows it once, as the cell's value, whatever the
    backend), its axes, and matplotlib.patches."""
    try:
        from matplotlib import patches
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise LongTaskError(
            "drawing needs matplotlib: pip install 'langgraph-longtask[notebook]'"
        ) from exc
    fig = Figure(figsize=(width, height))
    return fig, fig.subplots(), patches


def spans(events: list[Event]) -> list[tuple[str, datetime, datetime, str]]:
    """(step, start, end, outcome) of every step run and every pause, from the event log."""
    out: list[tuple[str, datetime, datetime, str]] = []
    open_runs: dict[str, datetime] = {}
    last = events[-1].ts if events else None
    for e in events:
        step = e.step
        if step is None:
            continue
        if e.kind in ("step.started", "approval.required", "wait.started"):
            open_runs.setdefault(step, e.ts)
        elif e.kind in ("step.completed", "step.failed", "step.skipped"):
            start = open_runs.pop(step, e.ts)
            outcome = {"step.completed": "completed", "step.failed": "failed"}.get(
                e.kind, "skipped"
            )
            out.append((step, start, e.ts, outcome))
        elif e.kind in ("approval.resolved", "wait.resolved"):
            start = open_runs.pop(step, e.ts)
            out.append((step, start, e.ts, "waiting"))
    for step, start in open_runs.items():
        assert last is not None
        out.append((step, start, last, "running"))
    return out


def timeline_figure(events: list[Event], steps: list[str], title: str) -> Any:
    """One row per step, a bar per run coloured by its outcome, pauses in blue."""
    rows = spans(events)
    fig, ax, patches = _figure(9, 0.45 * max(len(steps), 2) + 1.2)
    origin = events[0].ts if events else datetime.now()
    index = {name: i for i, name in enumerate(steps)}
    total = (events[-1].ts - origin).total_seconds() if events else 0.0
    # Instant steps still get a visible sliver, small beside the whole run.
    least = max(total * 0.004, 1e-4)
    for step, start, end, outcome in rows:
        if step not in index:
            continue
        left = (start - origin).total_seconds()
        width = max((end - start).total_seconds(), least)
        ax.barh(
            index[step], width, left=left, color=COLOURS[outcome], edgecolor="black", linewidth=0.3
        )
    ax.set_yticks(range(len(steps)), labels=steps)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the thread started")
    ax.set_title(title)
    handles = [patches.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    # Outside the axes: inside it would cover the last bars.
    ax.legend(handles, list(COLOURS), loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    fig.tight_layout()
    return fig


def draw_graph(task: LongTask) -> Any:
    """The task as a picture: stages as boxes left to right, steps inside, dependencies as
    arrows (``after=`` within a stage included)."""
    layout = task.layout
    width = len(task.stages)
    height = max(len(s.steps) for s in task.stages)
    fig, ax, patches = _figure(2.6 * width + 1, 1.1 * height + 1.4)
    pos: dict[str, tuple[float, float]] = {}
    for x, stage in enumerate(task.stages):
        ax.add_patch(
            patches.Rectangle(
                (x * 2.6 - 1.1, -0.7),
                2.2,
                height * 1.1 + 0.5,
                fill=True,
                facecolor="#f5f5f5",
                edgecolor="#bdbdbd",
            )
        )
        ax.text(x * 2.6, -0.95, stage.name, ha="center", va="top", fontsize=9, weight="bold")
        for y, step in enumerate(stage.steps):
            pos[step.name] = (x * 2.6, y * 1.1)
            ax.text(
                x * 2.6,
                y * 1.1,
                f"{step.name}\n({step.kind})",
                ha="center",
                va="center",
                fontsize=8,
                bbox={"boxstyle": "round", "facecolor": "white"},
            )
    for name, info in layout.items():
        for dep in info.depends_on:
            (x0, y0), (x1, y1) = pos[dep], pos[name]
            ax.annotate(
                "",
                xy=(x1 - 0.75, y1),
                xytext=(x0 + 0.75, y0),
                arrowprops={"arrowstyle": "->", "color": "#616161"},
            )
    ax.set_xlim(-1.3, width * 2.6 - 1.3)
    ax.set_ylim(height * 1.1, -1.4)
    ax.axis("off")
    ax.set_title(f"{task.name} v{task.version}")
    fig.tight_layout()
    return fig
