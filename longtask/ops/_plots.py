"""Pictures for notebooks and reports, drawn with matplotlib (no network, no graphviz): a
thread's timeline (a Gantt chart of its steps, waits shaded), its cost over time, and a
task's graph."""

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
    # an attempt whose process died (step.abandoned): it ends at its last event
    "abandoned": "#8d6e63",
}


#: the axes' left and right edges (fractions of the figure's width), the same on the
#: timeline and the cost chart so that their time axes line up, one above the other
_LEFT, _RIGHT = 0.2, 0.84


def _span(events: list[Event]) -> float:
    """Seconds from the thread's first event to its last: both charts' time axis, from 0."""
    return max((events[-1].ts - events[0].ts).total_seconds(), 1e-3) if events else 1.0


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
    #: when each open run last told of itself (an abandoned one ends there)
    seen: dict[str, datetime] = {}
    last = events[-1].ts if events else None
    for e in events:
        step = e.step
        if step is None:
            continue
        if e.kind == "step.abandoned":
            if step in open_runs:
                out.append((step, open_runs.pop(step), seen.pop(step), "abandoned"))
            continue
        if e.kind in ("step.started", "approval.required", "wait.started"):
            open_runs.setdefault(step, e.ts)
        if step in open_runs:
            seen[step] = e.ts
        if e.kind in ("step.completed", "step.failed", "step.skipped"):
            seen.pop(step, None)
            start = open_runs.pop(step, e.ts)
            outcome = {"step.completed": "completed", "step.failed": "failed"}.get(
                e.kind, "skipped"
            )
            out.append((step, start, e.ts, outcome))
        elif e.kind in ("approval.resolved", "wait.resolved"):
            seen.pop(step, None)
            start = open_runs.pop(step, e.ts)
            out.append((step, start, e.ts, "waiting"))
    for step, start in open_runs.items():
        assert last is not None
        out.append((step, start, last, "running"))
    return out


#: the shade of the time a thread waited for a person or an outside event
WAIT_SHADE = "#b3e5fc"
PAUSE_KINDS = {"approval.required": "approval", "wait.started": "wait"}
RESOLVE_KINDS = ("approval.resolved", "approval.expired", "wait.resolved", "wait.expired")


def waits(events: list[Event]) -> list[tuple[str, datetime, datetime, bool]]:
    """(step, start, end, resolved) of every wait for an approval or an outside event; one
    still open ends at the last event."""
    out: list[tuple[str, datetime, datetime, bool]] = []
    open_waits: dict[str, datetime] = {}
    for e in events:
        if e.step is None:
            continue
        if e.kind in PAUSE_KINDS:
            open_waits.setdefault(e.step, e.ts)
        elif e.kind in RESOLVE_KINDS and e.step in open_waits:
            out.append((e.step, open_waits.pop(e.step), e.ts, True))
    if events:
        out.extend((step, start, events[-1].ts, False) for step, start in open_waits.items())
    return sorted(out, key=lambda w: w[1])


def timeline_figure(
    events: list[Event], steps: list[str], title: str, stages: dict[str, str] | None = None
) -> Any:
    """A Gantt chart: one row per step (grouped by stage when ``stages`` maps steps to
    them), a bar per run coloured by its outcome, and the time spent waiting for a person or
    an outside event shaded across all rows. Bars have the gid ``step``, shades ``wait``."""
    rows = spans(events)
    fig, ax, patches = _figure(9, 0.45 * max(len(steps), 2) + 2.0)
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
            index[step],
            width,
            left=left,
            color=COLOURS[outcome],
            edgecolor="black",
            linewidth=0.3,
            gid="step",
        )
    for _, start, end, _ in waits(events):
        ax.axvspan(
            (start - origin).total_seconds(),
            (end - origin).total_seconds(),
            color=WAIT_SHADE,
            alpha=0.35,
            zorder=0,
            gid="wait",
        )
    ax.set_yticks(range(len(steps)), labels=steps)
    ax.invert_yaxis()
    ax.set_xlim(0, _span(events))  # from the thread's start, as the cost chart
    if stages:
        _stage_bands(ax, steps, stages)
    ax.set_xlabel("seconds since the thread started")
    ax.set_title(title)
    handles = [patches.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    handles.append(patches.Rectangle((0, 0), 1, 1, color=WAIT_SHADE, alpha=0.35))
    # Below the axes: inside it would cover the last bars, and the right margin holds the
    # stage names.
    height = fig.get_figheight()
    ax.legend(
        handles,
        [*COLOURS, "wait (shaded)"],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.6 / max(height - 1.6, 0.5)),
        ncol=len(handles),
        fontsize=8,
    )
    fig.subplots_adjust(left=_LEFT, right=_RIGHT, top=1 - 0.5 / height, bottom=1.2 / height)
    return fig


def _stage_bands(ax: Any, steps: list[str], stages: dict[str, str]) -> None:
    """A line between stages and each stage's name over its first row (lines and text, not
    patches: the bars stay the only patches besides the wait shades)."""
    from matplotlib.transforms import blended_transform_factory

    where = blended_transform_factory(ax.transAxes, ax.transData)
    previous = None
    for i, step in enumerate(steps):
        stage = stages.get(step)
        if stage == previous:
            continue
        if i:
            ax.axhline(i - 0.5, color="#9e9e9e", linewidth=0.6, linestyle="--")
        # in the right margin, beside its first row: over the axes it covered bars
        ax.text(
            1.01,
            i - 0.5,
            stage or "",
            transform=where,
            ha="left",
            va="top",
            fontsize=7,
            color="#616161",
            style="italic",
            clip_on=False,
        )
        previous = stage


def cost_figure(events: list[Event], title: str) -> Any:
    """Cumulative cost (left axis) and tokens (right axis) over the thread's time, from its
    ``model.call`` events, waits shaded as on the timeline. Lines have the gids ``cost`` and
    ``tokens``."""
    fig, ax, _ = _figure(9, 3.2)
    origin = events[0].ts if events else datetime.now()
    calls = [e for e in events if e.kind == "model.call"]
    xs: list[float] = [0.0]
    costs: list[float] = [0.0]
    tokens: list[float] = [0.0]
    for e in calls:
        xs.append((e.ts - origin).total_seconds())
        costs.append(costs[-1] + float(e.data.get("cost") or 0.0))
        tokens.append(tokens[-1] + float((e.data.get("usage") or {}).get("total") or 0))
    end = (events[-1].ts - origin).total_seconds() if events else 0.0
    xs.append(max(end, xs[-1]))
    costs.append(costs[-1])
    tokens.append(tokens[-1])
    for _, start, stop, _ in waits(events):
        ax.axvspan(
            (start - origin).total_seconds(),
            (stop - origin).total_seconds(),
            color=WAIT_SHADE,
            alpha=0.35,
            zorder=0,
            gid="wait",
        )
    (cost_line,) = ax.step(
        xs, costs, where="post", color="#c62828", linewidth=2.4, label="cost", gid="cost"
    )
    ax.set_ylabel("cost (cumulative)", color="#c62828")
    ax.set_xlabel("seconds since the thread started")
    other = ax.twinx()
    # dashed and thinner: where cost and tokens rise together the cost line still shows
    (tokens_line,) = other.step(
        xs,
        tokens,
        where="post",
        color="#1565c0",
        linewidth=1.2,
        linestyle="--",
        label="tokens",
        gid="tokens",
    )
    other.set_ylabel("tokens (cumulative)", color="#1565c0")
    ax.legend([cost_line, tokens_line], ["cost", "tokens"], loc="upper left", fontsize=8)
    ax.set_ylim(bottom=0)
    other.set_ylim(bottom=0)
    ax.set_xlim(0, _span(events))  # the timeline's time axis, so the two line up
    if not calls:
        ax.text(0.5, 0.5, "no model calls", transform=ax.transAxes, ha="center", color="#757575")
    summary = f"{len(calls)} model calls, cost {costs[-1]:.6g}, {int(tokens[-1])} tokens"
    ax.set_title(f"{title}: {summary}")
    fig.subplots_adjust(left=_LEFT, right=_RIGHT, top=0.86, bottom=0.17)
    return fig


def png(fig: Any) -> bytes:
    """The figure as PNG bytes (the Agg canvas: no display, no pyplot)."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


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
