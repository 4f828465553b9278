"""``longtask prune``: delete old finished threads with everything they own; ``longtask
delete``: one of them, by id."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from longtask.cli._app import MAX_INT, DbOpt, JsonOpt, ThreadArg, _runner, app, out
from longtask.cli._hints import cmd

if TYPE_CHECKING:
    from datetime import timedelta

    from longtask.ops import PruneReport

_AGE_HELP = "like 30d, 12h, 90m or 2w"


def _duration(value: str | None, option: str) -> timedelta | None:
    if value is None:
        return None
    from longtask.errors import InvalidInput
    from longtask.ops._prune import parse_duration

    try:
        return parse_duration(value, option)
    except InvalidInput as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


@app.command()
def prune(
    completed_before: Annotated[
        str | None,
        typer.Option(
            "--completed-before",
            help=f"Prune completed threads last updated longer ago than this ({_AGE_HELP}).",
        ),
    ] = None,
    failed_before: Annotated[
        str | None,
        typer.Option(
            "--failed-before",
            help=f"Prune failed (and cancelled) threads last updated longer ago ({_AGE_HELP}).",
        ),
    ] = None,
    cancelled_before: Annotated[
        str | None,
        typer.Option(
            "--cancelled-before",
            help="Prune cancelled threads last updated longer ago [default: --failed-before].",
        ),
    ] = None,
    keep_last_checkpoint: Annotated[
        bool,
        typer.Option(
            "--keep-last-checkpoint",
            help="Keep each thread's final state, results and artifacts; drop its history "
            "(older checkpoints, events).",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Change nothing; print what would go.")
    ] = False,
    batch: Annotated[
        int, typer.Option("--batch", min=1, max=MAX_INT, help="Threads selected per page.")
    ] = 100,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Delete old ended threads and all they own.

    Completed, failed and cancelled threads, with everything they own.

    Running and paused threads are never pruned, nor a thread a process or worker holds.
    Each thread goes in its own short transaction; blobs and artifact files are freed when
    no other thread refers to them."""
    ages = {
        "completed_before": _duration(completed_before, "--completed-before"),
        "failed_before": _duration(failed_before, "--failed-before"),
        "cancelled_before": _duration(cancelled_before, "--cancelled-before"),
    }
    if all(v is None for v in ages.values()):
        raise typer.BadParameter(
            "say what to prune: --completed-before 30d and/or --failed-before 90d",
            param_hint="--completed-before / --failed-before",
        )
    with _runner(db) as runner:
        report = runner.prune(
            **ages, keep_last_checkpoint=keep_last_checkpoint, dry_run=dry_run, batch=batch
        )
    if json_:
        print(json.dumps(report.to_json(), indent=2))
        return
    _print(report)


@app.command()
def delete(
    thread_id: ThreadArg,
    force: Annotated[
        bool, typer.Option("--force", help="Delete it (without: print what would go).")
    ] = False,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Delete one ended thread and all it owns.

    A completed, failed or cancelled thread goes with everything it owns, as `longtask
    prune` deletes an old one. Without --force, nothing changes: it prints what would go.
    A thread that has not ended (running, paused, waiting) is refused: cancel it first;
    so is a thread a process or worker is advancing."""
    with _runner(db, thread_id) as runner:
        report = runner.delete(thread_id, dry_run=not force)
    if json_:
        print(json.dumps(report.to_json(), indent=2))
        return
    _print(report, "delete")
    if not force:
        again = cmd(f"longtask delete {thread_id} --force")
        out.print(f"nothing deleted; delete it with: {escape(again)}")


def _print(report: PruneReport, verb: str = "prune") -> None:
    n = len(report.threads)
    verb = f"would {verb}" if report.dry_run else f"{verb[:-1] if verb.endswith('e') else verb}ed"
    what = " (history only: the last checkpoint kept)" if report.keep_last_checkpoint else ""
    by = ", ".join(f"{k} {v}" for k, v in sorted(report.by_status.items()))
    out.print(f"{verb} {n} thread{'' if n == 1 else 's'}{what}" + (f": {by}" if by else ""))
    for table, count in sorted(report.rows.items()):
        out.print(f"  {table}: {count} row{'' if count == 1 else 's'}")
    if report.blobs or not report.dry_run or not report.keep_last_checkpoint:
        out.print(f"  blobs: {report.blobs} ({_size(report.blob_bytes)})")
    if report.artifact_files:
        out.print(f"  artifact files: {report.artifact_files} ({_size(report.artifact_bytes)})")
    if report.skipped:
        shown = ", ".join(escape(t) for t in report.skipped[:10])
        more = f" and {len(report.skipped) - 10} more" if len(report.skipped) > 10 else ""
        out.print(f"skipped {len(report.skipped)} busy or revived thread(s): {shown}{more}")


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
