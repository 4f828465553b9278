"""``longtask watch``: a live terminal view of one thread, redrawn as its events arrive."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rich.console import Group
from rich.markup import escape
from rich.text import Text

from longtask.cli._output import MARKS, continue_commands, plural, progress_text, stage_state

if TYPE_CHECKING:
    from longtask.runtime import ThreadStatus
    from longtask.store import Event


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class WatchState:
    """What the view knows beyond the status: per-step times, progress, retries, the last
    event of every step (to spot a step that has gone quiet)."""

    def __init__(self) -> None:
        self.started: dict[str, datetime] = {}
        self.finished: dict[str, datetime] = {}
        self.progress: dict[str, str] = {}
        self.retries: dict[str, int] = {}
        self.last_seen: dict[str, datetime] = {}
        self.first: datetime | None = None
        self.last: datetime | None = None

    def add(self, event: Event) -> None:
        self.first = self.first or event.ts
        self.last = event.ts
        step = event.step
        if step is None:
            return
        self.last_seen[step] = event.ts
        if event.kind == "step.started":
            self.started.setdefault(step, event.ts)
            self.progress.pop(step, None)  # a new attempt reports afresh
        elif event.kind == "step.abandoned":
            # the attempt died with its process: the next one is timed from its own start
            self.started.pop(step, None)
            self.progress.pop(step, None)
        elif event.kind in ("step.completed", "step.skipped", "step.failed"):
            self.finished[step] = event.ts
        elif event.kind == "step.progress":
            self.progress[step] = progress_text(event.data)
        elif event.kind == "step.retry" and event.data.get("outcome") == "retry":
            self.retries[step] = self.retries.get(step, 0) + 1


def waiting_lines(st: ThreadStatus) -> list[str]:
    """What a paused thread waits for and the commands that continue it."""
    if st.status not in ("waiting_user", "waiting_external"):
        return []
    return ["waiting for:", *(f"  {line}" for line in continue_commands(st))]


def render(
    st: ThreadStatus, state: WatchState, quiet_after: float, *, waiting: bool = True
) -> Group:
    now = datetime.now(UTC)
    # A thread that stopped is timed to its last event; a live one to now.
    end = state.last if st.status not in ("running", "pending") and state.last else now
    elapsed = _clock((end - (state.first or st.created_at)).total_seconds())
    label = st.status if st.active or st.status != "running" else "running (no process)"
    lines = [
        Text.from_markup(
            f"[bold]{escape(st.task_name)}[/bold]  {escape(st.thread_id)}   {label}  "
            f"{st.progress:.0%}  {elapsed}"
        )
    ]
    stages: dict[str, list[str]] = {}
    for step in st.steps:
        text = f"{MARKS[step.state]} {escape(step.name)}"
        if step.items_total is not None and step.state != "completed":
            text += f"  {step.items_done}/{step.items_total}"
        elif step.name in state.progress and step.state == "running":
            text += f"  {escape(state.progress[step.name])}"
        if step.fix_rounds:
            text += f" [yellow](fix round {step.fix_rounds})[/yellow]"
        if state.retries.get(step.name):
            text += f" [yellow]({plural(state.retries[step.name], 'retry')})[/yellow]"
        start, stop = state.started.get(step.name), state.finished.get(step.name)
        if start and stop and step.state == "completed":
            text += f" [dim]{_clock((stop - start).total_seconds())}[/dim]"
        elif start and step.state == "running":
            text += f" [dim]{_clock((now - start).total_seconds())}[/dim]"
            quiet = (now - state.last_seen.get(step.name, start)).total_seconds()
            if quiet >= quiet_after:
                text += f" [red]no progress for {int(quiet // 60)} min[/red]"
        stages.setdefault(step.stage, []).append(text)
    for stage, items in stages.items():
        mark = stage_state({s.state for s in st.steps if s.stage == stage})
        lines.append(Text.from_markup(f"{MARKS[mark]} {escape(stage)}"))
        if mark == "completed":
            continue  # a finished stage is one line
        lines.append(Text.from_markup("    " + "   ".join(items)))
    if st.error:
        message = str(st.error.get("message"))
        message = message if len(message) <= 300 else message[:299] + "…"
        lines.append(
            Text.from_markup(
                f"[red]error[/red] in {escape(str(st.error.get('step')))}: {escape(message)}"
            )
        )
    if waiting and st.status in ("waiting_user", "waiting_external"):
        # The live view crops what is wider than the terminal: a cut line ends in "…" (not
        # mid-JSON, as if whole). The last frame leaves this out and `waiting_lines` are
        # printed after it in full, to be pasted.
        lines.extend(Text(line, no_wrap=True, overflow="ellipsis") for line in waiting_lines(st))
    return Group(*lines)
