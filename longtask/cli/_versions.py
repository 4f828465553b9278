"""``longtask versions``: which definitions of a task the code holds, and the live threads on
each (the question before a deploy that removes one)."""

from __future__ import annotations

import json
import shlex
from typing import Annotated

import typer
from rich.markup import escape

from longtask.cli._app import DbOpt, JsonOpt, _reader, app, out
from longtask.cli._hints import cmd

TaskRefArg = Annotated[
    str,
    typer.Argument(
        metavar="TASKREF",
        help="path/to/file.py:task or package.module:task (a LongTask or a versions(...)).",
    ),
]


@app.command()
def versions(task_ref: TaskRefArg, json_: JsonOpt = False, db: DbOpt = None) -> None:
    """A task's versions in the code, and the live threads on each.

    Live threads are running, paused, or failed and resumable. A thread on a definition the
    code no longer holds is listed too: this code cannot serve it (see `longtask check`).
    Reads only.
    """
    from longtask.ops._deployed import version_report
    from longtask.runtime._taskref import load_versions

    family = load_versions(task_ref)
    with _reader(db) as reader:
        report = version_report(reader.db.store, family)
    if json_:
        lines = [{**line.model_dump(), "live_total": line.live_total} for line in report.lines]
        print(json.dumps({"task": report.task, "versions": lines, "unserved": report.unserved}))
        return
    held = sum(1 for line in report.lines if line.in_code)
    live = sum(line.live_total for line in report.lines)
    out.print(
        f"[bold]{escape(report.task)}[/bold]: {held} version{'s' if held != 1 else ''} in "
        f"the code, {live} live thread{'s' if live != 1 else ''}"
    )
    for line in report.lines:
        mark = "newest" if line.newest else ("" if line.in_code else "[red]not in the code[/red]")
        counts = ", ".join(f"{n} {status}" for status, n in line.live.items()) or "none live"
        shown = " ".join(line.threads)
        more = line.live_total - len(line.threads)
        if more > 0:
            shown += f" (+{more} more)"
        out.print(
            f"  v{escape(line.version):<8} {line.definition_hash[:12]}  {mark:<6}  "
            f"{escape(counts)}{'  ' + escape(shown) if shown else ''}"
        )
    if report.unserved:
        out.print(
            f"{report.unserved} live thread{'s are' if report.unserved != 1 else ' is'} on a "
            "definition this code does not hold: keep that version beside the new one "
            "(longtask.versions(new, old)), or see what a migration would do with "
            f"`{escape(cmd('longtask check ' + shlex.quote(task_ref)))}`"
        )
