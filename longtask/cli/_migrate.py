"""Deploying a new version: ``check`` (can the code serve every live thread?) and
``migrate`` (move threads to another version, checked and recorded)."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from longtask.cli._app import DbOpt, JsonOpt, _runner, app, checked_by, out
from longtask.cli._hints import cmd
from longtask.cli._output import plural

if TYPE_CHECKING:
    from longtask.ops import MigrationPlan

TaskRefArg = Annotated[
    str,
    typer.Argument(
        metavar="TASKREF", help="The code to deploy: path/to/file.py:task or package.module:task."
    ),
]


def _renames(values: list[str] | None) -> dict[str, str]:
    from longtask.errors import InvalidInput

    out_: dict[str, str] = {}
    for value in values or []:
        old, sep, new = value.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise InvalidInput(f"--map {value!r} must be OLD=NEW (old step name = new step name)")
        if old.strip() in out_:
            raise InvalidInput(f"--map names step {old.strip()!r} twice")
        out_[old.strip()] = new.strip()
    return out_


def _plan_lines(plan: MigrationPlan) -> list[str]:
    kept = [f"{n} (from {o})" if n != o else n for n, o in plan.kept.items()]
    lines = [
        f"  kept results: {', '.join(kept) or 'none'}",
        f"  will run: {', '.join(plan.will_run) or 'nothing'}",
    ]
    if plan.results_dropped:
        lines.append(f"  results dropped (run again): {', '.join(plan.results_dropped)}")
    dropped = [f"{s} (with its result)" if had else s for s, had in plan.dropped.items()]
    if dropped:
        lines.append(f"  steps dropped: {', '.join(dropped)}")
    for label, names in (
        ("pauses kept", plan.pauses_kept),
        ("pauses asked again", plan.pauses_reasked),
        ("pauses dropped", plan.pauses_dropped),
    ):
        if names:
            lines.append(f"  {label}: {', '.join(names)}")
    lines += ["  changes:", *(f"    - {c}" for c in plan.changes)]
    if plan.refusals:
        lines += ["  refused:", *(f"    - {r}" for r in plan.refusals)]
    return lines


def _migrate_command(plan: MigrationPlan, task_ref: str) -> str:
    maps = "".join(f" --map {shlex.quote(f'{o}={n}')}" for o, n in plan.renames.items())
    return cmd(
        f"longtask migrate {shlex.quote(plan.thread_id)} --to {shlex.quote(plan.to_version)}"
        f" --task {shlex.quote(task_ref)}{maps} --by NAME"
    )


@app.command("check")
def check(task_ref: TaskRefArg, json_: JsonOpt = False, db: DbOpt = None) -> None:
    """Pre-deploy: can this code serve every live thread of its task.

    Reads only; writes nothing. For each running, paused or failed thread: served (its
    recorded definition is among the versions TASKREF names) or not, and then what
    changed, the migration plan to the newest version and the command to migrate it.
    Exit 0 when every live thread is served, 1 otherwise."""
    from longtask.runtime._taskref import load_versions

    family = load_versions(task_ref)
    newest = family.newest
    report: list[dict[str, Any]] = []
    with _runner(db) as runner:
        for rec in runner.db.store.live_threads(family.name):
            served = family.by_hash(rec.definition_hash)
            item: dict[str, Any] = {
                "thread_id": rec.thread_id,
                "status": rec.status,
                "version": rec.task_version,
                "definition_hash": rec.definition_hash,
                "served": served is not None,
            }
            if served is None:
                plan = runner.migrations.plan(rec.thread_id, newest)
                item["plan"] = plan.to_json()
                item["migrate"] = _migrate_command(plan, task_ref)
            report.append(item)
    unserved = [r for r in report if not r["served"]]
    if json_:
        print(
            json.dumps(
                {
                    "task": family.name,
                    "versions": [t.version for t in family],
                    "threads": report,
                    "ok": not unserved,
                },
                indent=2,
            )
        )
    else:
        versions = ", ".join(t.version for t in family)
        out.print(
            f"task {escape(family.name)}: versions {escape(versions)} in the code; "
            f"{plural(len(report), 'live thread')}, {len(unserved)} not served"
        )
        for r in report:
            head = f"{r['thread_id']} ({r['status']}, version {r['version']})"
            if r["served"]:
                out.print(f"served  {escape(head)}")
                continue
            out.print(f"NOT SERVED  {escape(head)}: its definition is not in the code")
            from longtask.ops import MigrationPlan

            plan = MigrationPlan(**{k: v for k, v in r["plan"].items() if k != "ok"})
            out.print(f"  plan to version {escape(newest.version)}:")
            for line in _plan_lines(plan):
                out.print(escape(line))
            if plan.ok:
                out.print(f"  migrate it with: {escape(r['migrate'])}")
            else:
                out.print(
                    "  keep its version in the code (versions(new, old)), or fix the "
                    f"refusals and then: {escape(r['migrate'])}"
                )
    if unserved:
        raise typer.Exit(1)


@app.command("migrate")
def migrate(
    to: Annotated[str, typer.Option("--to", metavar="VERSION", help="The version to move to.")],
    by: Annotated[
        str,
        typer.Option(
            "--by",
            metavar="NAME",
            help="Who migrates (recorded in the event).",
            callback=checked_by,
        ),
    ],
    thread_id: Annotated[
        str | None,
        typer.Argument(metavar="THREAD", help="The thread (or --all --from VERSION)."),
    ] = None,
    maps: Annotated[
        list[str] | None,
        typer.Option(
            "--map", metavar="OLD=NEW", help="A step renamed in the new version (repeatable)."
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan; change nothing.")
    ] = False,
    task: Annotated[
        str | None,
        typer.Option(
            "--task",
            metavar="TASKREF",
            help="The code with the version (default: the thread's own task reference).",
        ),
    ] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Every live thread of --task on --from VERSION.")
    ] = False,
    from_: Annotated[
        str | None, typer.Option("--from", metavar="VERSION", help="With --all.")
    ] = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Move threads to another version of their task, checked.

    Prints the plan: results kept, steps that will run, steps dropped, pauses kept, asked
    again or dropped. A migration that would lose a result still needed, skip a pending
    pause, or touch a thread another process holds is refused and changes nothing. The
    move is recorded as a `definition.migrated` event with the plan and --by."""
    from longtask.errors import InvalidInput, MigrationRefused

    renames = _renames(maps)
    if all_:
        if thread_id is not None:
            raise InvalidInput("give a THREAD or --all --from VERSION, not both")
        if not from_ or not task:
            raise InvalidInput("--all needs --from VERSION and --task TASKREF")
        with _runner(db) as runner:
            plans = runner.migrate_all(task, from_, to, renames=renames, dry_run=dry_run, by=by)
        _show(plans, dry_run, json_, many=True)
        if any(not p.ok for p in plans):
            raise typer.Exit(1)
        return
    if thread_id is None:
        raise InvalidInput("name the THREAD to migrate (or --all --from VERSION --task TASKREF)")
    if from_ is not None:
        raise InvalidInput("--from goes with --all")
    with _runner(db, thread_id) as runner:
        target: Any = to
        if task is not None:
            from longtask.runtime._taskref import load_versions

            family = load_versions(task)
            target = family.by_version(to)
            if target is None:
                raise InvalidInput(
                    f"{task} has no version {to!r}; it has {', '.join(t.version for t in family)}"
                )
        try:
            plan = runner.migrate(
                thread_id, target, renames=renames, dry_run=dry_run, by=by, task_ref=task
            )
        except MigrationRefused as exc:
            if json_:
                print(json.dumps(exc.plan.to_json(), indent=2))
                raise typer.Exit(1) from None
            raise
    _show([plan], dry_run, json_, many=False)
    if not plan.ok:
        raise typer.Exit(1)


def _show(plans: list[MigrationPlan], dry_run: bool, json_: bool, *, many: bool) -> None:
    if json_:
        shown: Any = [p.to_json() for p in plans] if many else plans[0].to_json()
        print(json.dumps(shown, indent=2))
        return
    if not plans:
        out.print("no live thread on that version")
    for plan in plans:
        if not plan.ok:
            verb = "would be refused" if dry_run else "refused"
        else:
            verb = "would move" if dry_run else "moved"
        before, after = f"version {plan.from_version}", f"version {plan.to_version}"
        if plan.from_version == plan.to_version:
            # the same version number on another definition (changed without a new version)
            before += f" (definition {plan.from_hash[:12]})"
            after += f" (definition {plan.to_hash[:12]})"
        moves = f"thread {plan.thread_id}: {verb} from {before} to {after}"
        out.print(escape(moves))
        for line in _plan_lines(plan):
            out.print(escape(line))
    if dry_run and any(p.ok for p in plans):
        out.print("dry run: nothing was changed; run it again without --dry-run to migrate")
