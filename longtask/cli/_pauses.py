"""Pause commands: approve, reject, signal, pending, tick, effects."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape

from longtask.cli._app import (
    MAX_INT,
    DbOpt,
    JsonOpt,
    _finish,
    _printer,
    _reader,
    _runner,
    app,
    checked_by,
    out,
)
from longtask.cli._jsonarg import parse_json
from longtask.cli._output import print_pending

ByOpt = Annotated[
    str,
    typer.Option("--by", help="Who decides (checked against approvers).", callback=checked_by),
]
CommentOpt = Annotated[str | None, typer.Option("--comment", help="A note kept with the decision.")]
PlanHashOpt = Annotated[
    str | None,
    typer.Option("--plan-hash", help="The plan hash you reviewed [default: the pending one]."),
]
StepArg = Annotated[
    str | None,
    typer.Argument(
        help="The approval step, or a graph's interrupt id [default: the only pending one]."
    ),
]


def _decide(
    db: str | None,
    thread_id: str,
    step: str | None,
    approved: bool,
    by: str,
    comment: str | None,
    plan_hash: str | None,
    edit: str | None = None,
) -> None:
    edited = parse_json(edit, "--edit")  # checked with the answer, as every door's is
    with _runner(db, thread_id, on_update=_printer()) as runner:
        runner.decide(
            thread_id,
            step,
            approved=approved,
            by=by,
            comment=comment,
            plan_hash=plan_hash,
            edited_args=edited,
        )
        raise typer.Exit(_finish(runner, thread_id))


@app.command()
def approve(
    thread_id: Annotated[str, typer.Argument(metavar="THREAD", help="The thread.")],
    step: StepArg = None,
    by: ByOpt = ...,  # type: ignore[assignment]
    comment: CommentOpt = None,
    plan_hash: PlanHashOpt = None,
    edit: Annotated[
        str | None,
        typer.Option(
            "--edit",
            help="A tool call's corrected arguments, as a JSON object or @file: it runs "
            "with them (a tool approval's, or a graph's HumanInTheLoopMiddleware's).",
        ),
    ] = None,
    db: DbOpt = None,
) -> None:
    """Approve a pending approval or a graph's tool review.

    The thread continues. A tool review is LangChain's HumanInTheLoopMiddleware's in a
    graph step: --edit JSON runs the tool with corrected arguments."""
    _decide(db, thread_id, step, True, by, comment, plan_hash, edit)


@app.command()
def reject(
    thread_id: Annotated[str, typer.Argument(metavar="THREAD", help="The thread.")],
    step: StepArg = None,
    by: ByOpt = ...,  # type: ignore[assignment]
    comment: CommentOpt = None,
    plan_hash: PlanHashOpt = None,
    db: DbOpt = None,
) -> None:
    """Reject a pending approval or a graph's tool review.

    An approval's on_reject decides what follows. A rejected tool of a graph's review does
    not run; --comment is the reason the model is told."""
    _decide(db, thread_id, step, False, by, comment, plan_hash)


@app.command()
def signal(
    thread_id: Annotated[str, typer.Argument(metavar="THREAD", help="The thread.")],
    name: Annotated[str, typer.Argument(help="The event: the name of a wait_for step.")],
    payload: Annotated[
        str | None, typer.Option("--payload", help="The event's payload as JSON, or @file.")
    ] = None,
    db: DbOpt = None,
) -> None:
    """Deliver an outside event (CI result, webhook) to a thread."""
    value = parse_json(payload, "--payload")
    with _runner(db, thread_id, on_update=_printer()) as runner:
        runner.signal(thread_id, name, value)
        raise typer.Exit(_finish(runner, thread_id))


@app.command()
def pending(
    thread_id: Annotated[str, typer.Argument(metavar="THREAD", help="The thread.")],
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """What a paused thread waits for, and how to answer it.

    Approvals (plan, hash, deadline), outside events (payload schema) and effects whose
    outcome is unknown (arguments, result schema)."""
    with _reader(db) as runner:
        items = runner.pending(thread_id)
    if json_:
        print(json.dumps([p.model_dump(mode="json") for p in items], indent=2))
    else:
        print_pending(out, thread_id, items)


@app.command()
def tick(
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=MAX_INT, help="At most this many.")
    ] = 100,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Act on passed deadlines, fire due schedules, send owed notices.

    Approvals and waits whose deadline has passed time out. Each due schedule tick starts
    its thread: run here (SQLite) or queued for the workers (PostgreSQL). Safe to run from
    cron, and from several processes at once: a tick starts one thread. --json lists the
    deadlines acted on, then one entry per schedule fired (with a "schedule" key).
    Notifications a process left undelivered (it exited first, or a receiver was down) and
    reminders of pauses still unanswered are sent too."""
    with _runner(db) as runner:
        results = runner.tick(limit=limit)
        fired = runner.fire_due(limit=limit)
        notices = runner.deliver_notifications()
        states = {
            f.thread_id: runner.db.store.get_thread(f.thread_id)
            for f in fired
            if f.thread_id is not None
        }
    if json_:
        print(json.dumps([r.__dict__ for r in results] + [f.to_json() for f in fired], indent=2))
        return
    for r in results:
        out.print(f"{escape(r.thread_id)} {escape(r.step)}: {escape(r.outcome)}")
    out.print(f"{len(results)} deadline(s) processed")
    if notices:
        out.print(f"{notices} notification attempt(s) made")
    for f in fired:
        rec = states.get(f.thread_id) if f.thread_id else None
        what = f"thread {escape(f.thread_id)} ({rec.status})" if f.thread_id and rec else ""
        missed = f", {f.missed} missed tick(s) not run" if f.missed else ""
        out.print(f"schedule {escape(f.schedule)}: {escape(f.outcome)} {what}{missed}".rstrip())


@app.command()
def effects(
    args: Annotated[
        list[str],
        typer.Argument(
            metavar="THREAD | resolve THREAD KEY",
            help="List a thread's side-effect ledger, or resolve one effect whose outcome is "
            "unknown.",
        ),
    ],
    succeeded: Annotated[
        bool, typer.Option("--succeeded", help="resolve: it happened (give --result).")
    ] = False,
    failed: Annotated[bool, typer.Option("--failed", help="resolve: it did not happen.")] = False,
    retry: Annotated[bool, typer.Option("--retry", help="resolve: call it again.")] = False,
    result: Annotated[
        str | None, typer.Option("--result", help="resolve --succeeded: its result, JSON or @file.")
    ] = None,
    reason: Annotated[
        str | None, typer.Option("--reason", help="resolve --failed: why it failed.")
    ] = None,
    by: Annotated[
        str | None, typer.Option("--by", help="resolve: who settles it.", callback=checked_by)
    ] = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """List a thread's side effects, or settle one cut off mid-call.

    `effects THREAD` lists the ledger; `effects resolve THREAD KEY --succeeded [--result
    JSON] | --failed [--reason WHY] | --retry` settles an effect whose outcome is unknown."""
    if args and args[0] == "resolve":
        if len(args) != 3:
            raise typer.BadParameter(
                "usage: longtask effects resolve THREAD KEY --succeeded|--failed|--retry"
            )
        chosen = [
            n
            for n, flag in (("succeeded", succeeded), ("failed", failed), ("retry", retry))
            if flag
        ]
        if len(chosen) != 1:
            raise typer.BadParameter("give exactly one of --succeeded, --failed, --retry")
        if result is not None and chosen[0] != "succeeded":
            raise typer.BadParameter("--result goes with --succeeded", param_hint="--result")
        if reason is not None and chosen[0] != "failed":
            raise typer.BadParameter("--reason goes with --failed", param_hint="--reason")
        value = parse_json(result, "--result")
        with _runner(db, args[1], on_update=_printer()) as runner:
            runner.resolve_effect(
                args[1],
                args[2],
                chosen[0],  # type: ignore[arg-type]
                result=value,
                reason=reason,
                by=by,
            )
            raise typer.Exit(_finish(runner, args[1]))
    if len(args) != 1:
        raise typer.BadParameter(
            "usage: longtask effects THREAD, or effects resolve THREAD KEY ..."
        )
    with _reader(db) as reader:
        rows = reader.effects(args[0])
    if json_:
        print(json.dumps([r.to_json() for r in rows], indent=2))
        return
    if not rows:
        out.print("no effects")
    for r in rows:
        out.print(
            f"{r.key}  {escape(r.step)}/{escape(r.name)}  {r.status}  calls={r.calls}"
            + (f"  error={escape(r.error)}" if r.error else "")
        )
