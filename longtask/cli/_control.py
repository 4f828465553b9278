"""Taking over by hand: cancel, retry, skip, budget."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from longtask.cli._app import (
    DbOpt,
    JsonOpt,
    ThreadArg,
    WhoOpt,
    _finish,
    _printer,
    _runner,
    app,
    out,
)
from longtask.cli._hints import cmd
from longtask.cli._jsonarg import parse_json
from longtask.cli._output import print_budget

if TYPE_CHECKING:
    from longtask.store import BudgetState


@app.command()
def cancel(
    thread_id: ThreadArg,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (recorded).")] = None,
    by: WhoOpt = None,
    db: DbOpt = None,
) -> None:
    """Cancel a thread and undo its completed steps.

    No further step starts, and the compensations of its completed steps run newest
    first, each at most once. Run it again to finish an interrupted cancel. A thread
    another process is advancing stops at its next step."""
    with _runner(db, thread_id) as runner:
        done = runner.cancel(thread_id, reason=reason, by=by)
        if not done:
            out.print(
                f"cancel of {escape(thread_id)} requested: the process advancing it stops at "
                f"its next step and runs the compensations (see "
                f"`{escape(cmd(f'longtask status {thread_id}'))}`)"
            )
            raise typer.Exit(0)
        status = runner.status(thread_id)
        out.print(f"thread {escape(thread_id)} is {status.status}")
        if status.error:
            out.print(f"[red]error[/red]: {escape(str(status.error.get('message')))}")
        raise typer.Exit(0 if status.status == "cancelled" else 1)


@app.command()
def retry(
    thread_id: ThreadArg,
    step: Annotated[
        str | None, typer.Argument(help="The failed step [default: the one that failed].")
    ] = None,
    by: WhoOpt = None,
    db: DbOpt = None,
) -> None:
    """Run a failed step again, then continue the thread.

    Also a step paused for permission or budget; it gets a fresh set of attempts. A rejected
    or timed-out approval (or wait) that failed the thread is asked again, with a fresh
    request."""
    with _runner(db, thread_id, on_update=_printer()) as runner:
        runner.retry(thread_id, step, by=by)
        raise typer.Exit(_finish(runner, thread_id))


@app.command()
def skip(
    thread_id: ThreadArg,
    step: Annotated[str, typer.Argument(help="The step to mark done.")],
    result: Annotated[
        str, typer.Option("--result", help="The step's result, as JSON or @file.")
    ] = "null",
    by: WhoOpt = None,
    db: DbOpt = None,
) -> None:
    """Mark a step done with a given result, then continue.

    As if the step had returned the result."""
    value = parse_json(result, "--result")
    with _runner(db, thread_id, on_update=_printer()) as runner:
        runner.skip(thread_id, step, value, by=by)
        raise typer.Exit(_finish(runner, thread_id))


@app.command()
def budget(
    thread_id: ThreadArg,
    add_tokens: Annotated[
        int | None, typer.Option("--add-tokens", min=1, help="Raise the token limit.")
    ] = None,
    add_cost: Annotated[
        float | None, typer.Option("--add-cost", min=0, help="Raise the cost limit.")
    ] = None,
    add_tool_calls: Annotated[
        int | None, typer.Option("--add-tool-calls", min=1, help="Raise the tool-call limit.")
    ] = None,
    add_time: Annotated[
        float | None,
        typer.Option("--add-time", min=0, help="Raise the running-time limit (seconds)."),
    ] = None,
    extend_deadline: Annotated[
        float | None,
        typer.Option("--extend-deadline", min=0, help="Move the deadline later (seconds)."),
    ] = None,
    by: WhoOpt = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Show a thread's budget and usage, or raise its limits.

    A thread paused by its budget continues with `longtask resume THREAD` afterwards."""
    raising = any(
        v is not None for v in (add_tokens, add_cost, add_tool_calls, add_time, extend_deadline)
    )
    state: BudgetState | None
    with _runner(db) as runner:
        if raising:
            state = runner.raise_budget(
                thread_id,
                tokens=add_tokens,
                cost=add_cost,
                tool_calls=add_tool_calls,
                wall_time=add_time,
                deadline=extend_deadline,
                by=by,
            )
        else:
            state = runner.budget(thread_id)
        paused = runner.status(thread_id).status == "waiting_user"
    if json_:
        print(json.dumps(state.to_json() if state else None, indent=2))
        return
    print_budget(out, state, thread_id)
    if raising and paused:
        out.print(f"continue with: {escape(cmd(f'longtask resume {thread_id}'))}")
