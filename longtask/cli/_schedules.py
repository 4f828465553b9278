"""``longtask schedule``: add, ls, rm, pause, resume. How a schedule reads (its fire times,
the line ``status`` prints) is ``_schedule_text``'s."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from longtask.cli._app import DbOpt, JsonOpt, _runner, _stable_ref, app, out
from longtask.cli._hints import cmd
from longtask.cli._jsonarg import parse_json
from longtask.cli._schedule_text import when

if TYPE_CHECKING:
    from longtask._runner import Runner
    from longtask.store import ScheduleRecord

schedule_app = typer.Typer(
    help="Start tasks on a cron schedule.\n\nFired by the workers, serve or `longtask tick`.",
    no_args_is_help=True,
)
app.add_typer(schedule_app, name="schedule")

NameArg = Annotated[str, typer.Argument(metavar="NAME", help="The schedule's name.")]


def _firing_hint(runner: Runner) -> str:
    if runner.db.url.scheme == "postgresql":
        return f"fired by `{cmd('longtask worker')}` (any number of them: one thread per tick)"
    # cron's environment has no $LONGTASK_DB and cron runs in $HOME: the crontab line
    # names the database by its absolute path
    url = runner.db.url
    named = f"sqlite:///{url.path.resolve()}" if url.path is not None else url.redacted
    return (
        f"fired by `{cmd('longtask serve')}` while it runs, or by `{cmd('longtask tick')}` from "
        f"the system's crontab: * * * * * {_this_longtask()} tick --db {shlex.quote(named)}"
    )


def _this_longtask() -> str:
    """The running ``longtask`` by its absolute path: cron's PATH is /usr/bin:/bin, where a
    virtualenv's (or pipx's, or ~/.local's) ``longtask`` is not found."""
    import sys
    from pathlib import Path

    beside = Path(sys.executable).parent / "longtask"
    if beside.is_file():
        return shlex.quote(str(beside.absolute()))
    argv0 = Path(sys.argv[0])
    if argv0.name == "longtask" and argv0.is_file():
        return shlex.quote(str(argv0.absolute()))
    return f"{shlex.quote(sys.executable)} -m longtask"


def _line(rec: ScheduleRecord) -> str:
    state = "paused" if rec.paused else f"next {when(rec.next_fire_at, rec.timezone)}"
    parts = [
        f"[bold]{escape(rec.name)}[/bold]",
        f"task={escape(rec.task_name)}",
        f"cron={escape(repr(rec.cron))}",
        escape(rec.timezone),
        state,
    ]
    if rec.catch_up != "one":
        parts.append(f"catch-up={rec.catch_up}")
    if rec.inputs:
        parts.append(f"inputs={escape(json.dumps(rec.inputs))}")
    if rec.last_thread:
        parts.append(f"last={escape(rec.last_thread)}")
    return "  ".join(parts)


@schedule_app.command("add")
def add(
    task_ref: Annotated[
        str,
        typer.Argument(
            metavar="TASKREF",
            help="The task: package.module:name, or a file path every process that fires it "
            "can read.",
        ),
    ],
    cron: Annotated[
        str | None,
        typer.Option(
            "--cron",
            help="Five-field cron expression, e.g. '0 3 * * *' [default: register the "
            "schedules declared in the task].",
        ),
    ] = None,
    input: Annotated[
        str | None, typer.Option("--input", help="With --cron: task inputs as JSON or @file.")
    ] = None,
    timezone: Annotated[
        str | None,
        typer.Option("--timezone", help="With --cron: IANA timezone of the cron [default: UTC]."),
    ] = None,
    catch_up: Annotated[
        str | None,
        typer.Option(
            "--catch-up",
            help="With --cron: 'one' runs the latest missed tick once when firing resumes, "
            "'none' skips missed ticks [default: one].",
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name", help="With --cron: the schedule's name [default: task name and a digest]."
        ),
    ] = None,
    db: DbOpt = None,
) -> None:
    """Register a task's schedules.

    Without --cron: the schedules declared in the task (LongTask(schedules=[...])) are
    added or updated, and declared ones gone from the code removed; run it again after
    each deploy. With --cron: one more schedule for the task."""
    from longtask.model import Schedule
    from longtask.runtime import load_task

    extras = {
        "--input": input,
        "--timezone": timezone,
        "--catch-up": catch_up,
        "--name": name,
    }
    if cron is None:
        given = next((k for k, v in extras.items() if v is not None), None)
        if given is not None:
            raise typer.BadParameter(
                "goes with --cron (a schedule added by hand); declared schedules are set "
                "in the task's code",
                param_hint=given,
            )
    if catch_up is not None and catch_up not in ("one", "none"):
        raise typer.BadParameter("must be 'one' or 'none'", param_hint="--catch-up")
    inputs = parse_json(input, "--input")
    if inputs is not None and not isinstance(inputs, dict):
        raise typer.BadParameter("must be a JSON object", param_hint="--input")
    task = load_task(task_ref)
    ref = _stable_ref(task_ref)
    with _runner(db, create=True) as runner:
        if cron is None:
            if not task.schedules:
                raise typer.BadParameter(
                    f"task {task.name!r} declares no schedules; give --cron to add one, or "
                    "declare them with LongTask(..., schedules=[Schedule(...)])",
                    param_hint="--cron",
                )
            changes = runner.register_schedules(task, task_ref=ref)
            for sched, change in changes:
                if change == "removed":
                    out.print(f"{escape(sched)}: removed (no longer declared)")
                    continue
                out.print(f"{escape(sched)}: {change}")
                out.print("  " + _line(runner.schedule(sched)))
        else:
            schedule = Schedule(
                cron,
                inputs=inputs or {},
                timezone=timezone or "UTC",
                catch_up="none" if catch_up == "none" else "one",
                name=name,
            )
            rec, change = runner.add_schedule(task, schedule, task_ref=ref)
            out.print(f"{escape(rec.name)}: {change}")
            out.print("  " + _line(rec))
        out.print(escape(_firing_hint(runner)))


@schedule_app.command("ls")
def ls(json_: JsonOpt = False, db: DbOpt = None) -> None:
    """Registered schedules, the next to fire first.

    Each with its next fire time (in its timezone and in UTC), whether it is paused, and
    the last thread it started."""
    with _runner(db) as runner:
        rows = runner.schedules()
        hint = _firing_hint(runner)
    if json_:
        print(json.dumps([r.to_json() for r in rows], indent=2))
        return
    if not rows:
        out.print(f"no schedules; add one with `{escape(cmd('longtask schedule add TASKREF'))}`")
        return
    for rec in rows:
        out.print(_line(rec))
        if rec.last_error:
            out.print(f"  [red]last attempt to fire failed[/red]: {escape(rec.last_error)}")
    out.print(escape(hint))


@schedule_app.command("rm")
def rm(name: NameArg, db: DbOpt = None) -> None:
    """Remove a schedule (threads it started stay)."""
    with _runner(db) as runner:
        rec = runner.schedule(name)
        runner.remove_schedule(name)
    out.print(f"schedule {escape(name)} removed")
    if rec.origin == "declared":
        again = cmd(f"longtask schedule add {rec.task_ref}")
        out.print(
            f"it is declared in task {escape(rec.task_name)}'s code: `{escape(again)}` adds "
            "it again unless it is removed there"
        )


@schedule_app.command("pause")
def pause(name: NameArg, db: DbOpt = None) -> None:
    """Fire nothing from this schedule until it is resumed."""
    with _runner(db) as runner:
        runner.pause_schedule(name)
    out.print(
        f"schedule {escape(name)} paused; resume with "
        f"`{escape(cmd(f'longtask schedule resume {name}'))}`"
    )


@schedule_app.command("resume")
def resume(name: NameArg, db: DbOpt = None) -> None:
    """Fire again from the next tick.

    Ticks that passed while paused are not run."""
    with _runner(db) as runner:
        rec = runner.resume_schedule(name)
    out.print(f"schedule {escape(name)} resumed; next {when(rec.next_fire_at, rec.timezone)}")
