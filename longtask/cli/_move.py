"""Moving a thread between databases: ``export`` and ``import``."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from longtask.cli._app import DbOpt, JsonOpt, ThreadArg, _runner, app, out
from longtask.cli._hints import cmd


@app.command("export")
def export_(
    thread_id: ThreadArg,
    output: Annotated[
        Path,
        typer.Option(
            "-o",
            "--output",
            metavar="FILE.ltz",
            help="The file to write (an existing one only with --force).",
        ),
    ],
    force: Annotated[
        bool, typer.Option("--force", help="Replace FILE.ltz if it exists (a regular file).")
    ] = False,
    head_only: Annotated[
        bool,
        typer.Option(
            "--head-only",
            help="Only the latest checkpoint (no history before it); a smaller file.",
        ),
    ] = False,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Write a thread and all it owns to one file.

    Checkpoints, events, the effect ledger, artifacts: everything the thread owns;
    `longtask import` loads it into another database."""
    with _runner(db) as runner:
        summary = runner.export_thread(thread_id, output, head_only=head_only, force=force)
    if json_:
        print(json.dumps(summary.to_json(), indent=2))
        return
    checkpoints = summary.rows.get("longtask_cp_checkpoints", 0)
    events = summary.rows.get("longtask_events", 0)
    out.print(
        f"exported thread {escape(thread_id)} to {escape(summary.path)} ({checkpoints} "
        f"checkpoint(s), {events} event(s), {summary.artifacts} artifact(s))"
    )
    # not cmd(): this process's --db is the source; the import names its own target
    out.print(
        f"load it with `longtask import {escape(shlex.quote(summary.path))}`, its --db (or "
        "$LONGTASK_DB) naming the database to load it into"
    )


@app.command("import")
def import_(
    file: Annotated[
        Path, typer.Argument(metavar="FILE.ltz", help="A file written by `longtask export`.")
    ],
    as_id: Annotated[
        str | None,
        typer.Option(
            "--as", metavar="NEW_ID", help="Import under this thread id instead of its own."
        ),
    ] = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Load an exported thread into this database.

    All or nothing; `resume`, `approve` and the other commands then continue it here."""
    with _runner(db, create=True) as runner:
        summary = runner.import_thread(file, as_id=as_id)
        status = runner.status(summary.thread_id).status
    if json_:
        print(json.dumps({**summary.to_json(), "status": status}, indent=2))
        return
    renamed = (
        f" as {escape(summary.thread_id)}" if summary.thread_id != summary.source_thread_id else ""
    )
    out.print(
        f"imported thread {escape(summary.source_thread_id)}{renamed} ({status}) from "
        f"{escape(summary.path)}"
    )
    out.print(f"see it with: {escape(cmd(f'longtask status {summary.thread_id}'))}")
