"""``longtask report``: a thread's report, one Markdown or HTML file to attach to a ticket."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from longtask.cli._app import DbOpt, JsonOpt, _runner, app, out

ThreadArg = Annotated[str, typer.Argument(metavar="THREAD", help="The thread.")]


@app.command()
def report(
    thread_id: ThreadArg,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE",
            help="Where to write it [default: THREAD-report.md in the current directory].",
            dir_okay=False,
        ),
    ] = None,
    format_: Annotated[
        str | None,
        typer.Option(
            "--format",
            metavar="md|html",
            help="md or html [default: from FILE's extension, else md].",
        ),
    ] = None,
    charts: Annotated[
        bool, typer.Option("--charts/--no-charts", help="Draw the timeline and cost charts.")
    ] = True,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Write a thread's report to a Markdown or HTML file.

    One file to attach to a ticket.
    It holds the task, inputs, status, times, cost, tokens and budget left; a timeline
    (a Gantt chart of the steps by stage, waits shaded) and the cost over time; every step
    with its duration, attempts, fix rounds and usage; approvals and answers to a graph's
    interrupts (who decided what, when), waits and signals, people's actions, side
    effects and errors. HTML is one
    self-contained file; Markdown links its charts, written to FILE-files/ beside it
    (FILE without its extension). The charts need matplotlib
    (pip install 'langgraph-longtask[notebook]'); without it the report has none.
    """
    if format_ is not None and format_ not in ("md", "html"):
        raise typer.BadParameter("must be md or html", param_hint="--format")
    with _runner(db) as runner:
        path = runner.report(thread_id, output, format_, charts=charts)
    if json_:
        print(json.dumps({"thread_id": thread_id, "path": str(path)}))
    else:
        out.print(f"wrote {escape(str(path))}")
