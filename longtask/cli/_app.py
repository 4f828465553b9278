"""The ``longtask`` command. Uses only the public API; LangGraph is imported on first use so
that ``longtask --help`` stays fast."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from longtask.cli._errors import (
    Group,
    Interrupted,
    connection_lost,
    continue_hint,
    disk_full,
    disk_full_message,
    lost_message,
    one_line_warnings,
    release_held,
    reported,
    scrub_env,
    session,
    stop_on_ctrl_c,
)
from longtask.cli._hints import cmd, in_text, remember_db
from longtask.cli._jsonarg import ContextOpt, parse_context
from longtask.cli._jsonarg import parse_json as _parse_json
from longtask.cli._output import (
    continue_commands,
    plural,
    print_status,
    print_threads,
    status_exit_code,
)
from longtask.cli._values import jsonable, render, render_text

if TYPE_CHECKING:
    from longtask._runner import Runner
    from longtask.runtime import Reader, ThreadStatus
    from longtask.store import Event


def _plain_metavars() -> None:
    """Usage lines and option lists as people read and paste them: ``THREAD``, ``[STEP]``,
    ``--reason REASON``, ``--concurrency N``. Typer 0.29 writes a required argument as
    ``{THREAD}`` (read as a literal brace by a shell user) and every value's Python type,
    ``<str>``, which says nothing about what to write."""
    from typer import core

    def usage(self: core.TyperArgument) -> str:
        name = self.metavar or (self.name or "").upper()
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    def option_value(self: core.TyperOption, ctx: Any) -> str | None:
        if self.metavar is not None:
            return self.metavar
        desc = self.type_descriptor
        if desc.is_choice:
            value = option_type(self, ctx) or ""
            return value.strip("<>").replace("list[", "").rstrip("]") or None
        bare = self.bare_type().replace("list[", "").rstrip("]")
        name = (self.name or "").upper()
        value = {"int": "N", "float": "NUMBER"}.get(bare) or (name if len(name) <= 10 else "TEXT")
        return value + ("..." if self.nargs != 1 else "")

    option_type = core.TyperOption.display_type_rich
    core.TyperArgument._usage_display_name = usage  # type: ignore[method-assign]
    core.TyperArgument.display_type_rich = lambda self, ctx: None  # type: ignore[method-assign]
    name_column = core.TyperArgument._rich_display_name
    core.TyperArgument._rich_display_name = (  # type: ignore[method-assign]
        lambda self: name_column(self) if self.metavar else name_column(self).upper()
    )
    core.TyperOption.display_type_rich = option_value  # type: ignore[method-assign]


_plain_metavars()

app = typer.Typer(
    name="longtask",
    cls=Group,
    help=(
        "Durable, resumable multi-stage tasks on LangGraph.\n\n"
        "Exit codes: 0 completed, 1 error or failed, 2 usage, 3 paused (waiting), "
        "130 interrupted (Ctrl-C)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
app.add_typer(db_app, name="db")


class _Out(Console):
    """The CLI's standard output. When its reader goes away (``longtask run … | head -1``)
    the command goes on without printing: rich's default ends the process with
    ``SystemExit``, which, raised while a run reports a finished step, would fail the
    thread. Whatever is running finishes as it would have; a note on stderr says so."""

    def on_broken_pipe(self) -> None:
        import os

        self.quiet = True
        # Later writes, by rich or print(), go nowhere instead of failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        thread = session["thread"]
        going = f"; thread {thread} runs on without printing" if thread else ""
        try:
            sys.stderr.write(f"note: standard output was closed{going}\n")
            sys.stderr.flush()
        except OSError:
            pass


out = _Out(highlight=False, soft_wrap=True)

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        metavar="URL",
        envvar="LONGTASK_DB",
        help="Database URL: sqlite:///path.db or postgresql://user@host/db "
        "[default: sqlite:///.longtask/longtask.db]",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
#: the largest count an option takes: what a database integer holds (a larger one was an
#: internal OverflowError)
MAX_INT = 2**63 - 1
ThreadArg = Annotated[str, typer.Argument(metavar="THREAD", help="The thread.")]


def checked_by(value: str | None) -> str | None:
    """The ``--by`` of every command, through the one check of who acts (the Runner's
    ``by=`` passes it too): a usage error before anything is opened."""
    if value is None:
        return None
    from longtask.errors import InvalidInput
    from longtask.runtime._who import check_by

    try:
        return check_by(value)
    except InvalidInput as exc:
        raise typer.BadParameter(str(exc), param_hint="--by") from None


WhoOpt = Annotated[
    str | None,
    typer.Option(
        "--by",
        metavar="NAME",
        help="Who acts (recorded in the event) [default: you].",
        callback=checked_by,
    ),
]


def _runner(
    db: str | None, thread: str | None = None, *, create: bool = False, **kw: Any
) -> Runner:
    """A Runner on ``db``; ``thread`` names the thread the command advances (so a lost
    database connection can say how to continue it). Only commands that start threads
    ``create`` a missing SQLite database; the others say there is none and leave the disk
    as it was."""
    from longtask._runner import Runner

    session.update(db=db, thread=thread)
    return Runner(db, create=create, **kw)


def _reader(db: str | None) -> Reader:
    """What a read of our own tables needs (status, results, events, threads, effects):
    a Runner's reading methods without LangGraph, so the command starts fast."""
    from longtask.runtime._reader import Reader

    session.update(db=db, thread=None)
    return Reader(db)


def _printer(header: str | None = None) -> Any:
    # The header waits for the first finished step: a run refused up front (bad inputs, a
    # thread id in use) prints only its error.
    pending_header = [header] if header else []

    def on_update(thread_id: str, steps: list[str]) -> None:
        while pending_header:
            out.print(pending_header.pop())
        for step in steps:
            out.print(f"[green]✓[/green] {escape(step)}")

    return on_update


def _finish(runner: Runner, thread_id: str) -> int:
    record = runner.db.store.get_thread(thread_id)
    if runner.worker is None and record is not None and record.mode == "worker":
        out.print(
            f"thread {escape(thread_id)} is served by workers: sent to the queue; follow it "
            f"with `{escape(cmd(f'longtask watch {thread_id}'))}`"
        )
        return 0
    status = runner.status(thread_id)
    code = status_exit_code(status.status)
    if status.status == "completed":
        out.print(f"thread {escape(thread_id)} completed ({plural(len(status.steps), 'step')})")
        out.print(f"results: {escape(cmd(f'longtask result {thread_id}'))}")
    elif code == 3:
        out.print(f"thread {escape(thread_id)} is paused ({status.status}); continue with:")
        for line in continue_commands(status):
            out.print(f"  {escape(line)}")
    else:
        out.print(f"thread {escape(thread_id)} is {status.status}")
    return code


@app.command()
def run(
    task_ref: Annotated[
        str,
        typer.Argument(
            metavar="TASKREF", help="The task: path/to/file.py:name or package.module:name."
        ),
    ],
    thread: Annotated[
        str | None, typer.Option("--thread", help="Thread id to use [default: a new one].")
    ] = None,
    input: Annotated[
        str | None,
        typer.Option("--input", help="Task inputs as JSON, or @file.json."),
    ] = None,
    context: ContextOpt = None,
    db: DbOpt = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            metavar="NAME",
            help="Who starts it: the thread's owner [default: you].",
            callback=checked_by,
        ),
    ] = None,
) -> None:
    """Start a task on a new thread and run it.

    It runs until it completes, pauses (exit 3) or fails."""
    from longtask.runtime import load_task

    inputs = _parse_json(input, "--input")
    run_context = parse_context(context)
    task = load_task(task_ref)
    thread_id = _thread_option(thread)
    header = f"thread {escape(thread_id)}: {escape(task.name)} v{escape(task.version)}"
    with _runner(db, thread_id, create=True, on_update=_printer(header)) as runner:
        runner.start(
            task,
            inputs,
            thread_id=thread_id,
            task_ref=_stable_ref(task_ref),
            by=by,
            context=run_context,
        )
        raise typer.Exit(_finish(runner, thread_id))


def _new_thread_id() -> str:
    import uuid

    return f"lt-{uuid.uuid4().hex[:12]}"


def _thread_option(thread: str | None) -> str:
    """The id ``--thread`` gives a new thread (checked before anything runs), or a new one
    when it is left out. An empty ``--thread ""`` is refused, not taken as "left out"."""
    if thread is None:
        return _new_thread_id()
    from longtask.errors import InvalidInput
    from longtask.runtime._threadid import check_thread_id

    try:
        check_thread_id(thread)
    except InvalidInput as exc:
        raise typer.BadParameter(str(exc), param_hint="--thread") from None
    return thread


def _stable_ref(ref: str) -> str:
    """File references are stored absolute so any working directory can resume them."""
    target, _, attr = ref.rpartition(":")
    if target.endswith(".py") or "/" in target:
        return f"{Path(target).resolve()}:{attr}"
    return ref


@app.command()
def resume(
    thread_id: Annotated[str, typer.Argument(metavar="THREAD", help="The thread to continue.")],
    resume_value: Annotated[
        str | None,
        typer.Option("--resume", help="Value for the pending interrupt, as JSON or @file."),
    ] = None,
    update: Annotated[
        str | None,
        typer.Option("--update", help='State update as JSON: {"step": result, ...} or @file.'),
    ] = None,
    goto: Annotated[
        list[str] | None,
        typer.Option("--goto", metavar="STEP", help="Step(s) to run next (repeatable)."),
    ] = None,
    interrupt: Annotated[
        str | None,
        typer.Option(
            "--interrupt",
            help="Which pause --resume answers: its step name or LangGraph interrupt id.",
        ),
    ] = None,
    new_input: Annotated[
        str | None,
        typer.Option(
            "--input",
            help=(
                "A new input (JSON or @file) for a served LangGraph graph's thread that has "
                "finished: the graph runs again on its state (a chat's next message)."
            ),
        ),
    ] = None,
    context: Annotated[
        str | None,
        typer.Option(
            "--context",
            metavar="JSON",
            help="With --input: the new run's context (JSON or @file), which the graph "
            "reads as runtime.context [default: none, the context schema's defaults].",
        ),
    ] = None,
    allow_changed_definition: Annotated[
        bool,
        typer.Option(
            "--allow-changed-definition",
            help="Resume even though the task definition changed since the thread started.",
        ),
    ] = False,
    skip_pending: Annotated[
        bool,
        typer.Option(
            "--skip-pending",
            help="With --goto: go even past a pending approval or wait (recorded, with --by).",
        ),
    ] = False,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help=(
                "Who skips (with --goto), answers (with --resume), changes the state (with "
                "--update) or sends a new input (with --input) [default: you]."
            ),
            callback=checked_by,
        ),
    ] = None,
    db: DbOpt = None,
) -> None:
    """Continue a thread from its last checkpoint.

    For a failed, interrupted or paused thread; finished steps do not run again. A --goto
    past a pending approval or wait is refused unless --skip-pending. With --input, a
    served LangGraph graph's finished thread runs its graph again on its state."""
    command = None
    if context is not None and new_input is None:
        raise typer.BadParameter(
            "goes with --input: a run that continues a thread keeps its context",
            param_hint="--context",
        )
    if new_input is not None:
        if resume_value is not None or update is not None or goto or interrupt is not None:
            raise typer.BadParameter(
                "starts a new run of the graph: use it without --resume, --update, --goto "
                "and --interrupt",
                param_hint="--input",
            )
        again = _parse_json(new_input, "--input")
        if not isinstance(again, dict):
            raise typer.BadParameter(
                "must be a JSON object of the graph's input", param_hint="--input"
            )
        run_context = parse_context(context)
        with _runner(db, thread_id, on_update=_printer()) as runner:
            runner.run_again(thread_id, again, by=by, context=run_context)
            raise typer.Exit(_finish(runner, thread_id))
    resume_v = _parse_json(resume_value, "--resume")
    if interrupt is not None and (resume_value is None or update is not None or goto):
        raise typer.BadParameter(
            "answers a pause: use it with --resume only (not with --update or --goto)",
            param_hint="--interrupt",
        )
    if skip_pending and not goto:
        raise typer.BadParameter(
            "goes with --goto (a jump past a pending approval or wait)",
            param_hint="--skip-pending",
        )
    if by is not None and not goto and resume_value is None and update is None:
        raise typer.BadParameter(
            "goes with --goto (a jump past a pending approval or wait), --resume (who "
            "answers) or --update (who changed the state)",
            param_hint="--by",
        )
    if resume_value is not None and update is None and not goto:
        # An answer to a pause: checked against what the thread waits for, and made by the
        # caller (--by, else this user): a decision naming anybody else is refused.
        with _runner(db, thread_id, on_update=_printer()) as runner:
            from longtask.runtime._who import whoami

            runner.answer(
                thread_id,
                resume_v,
                interrupt=interrupt,
                by=by or whoami(),
                allow_changed_definition=allow_changed_definition,
            )
            raise typer.Exit(_finish(runner, thread_id))
    update_v = _parse_json(update, "--update")
    if update_v is not None and not isinstance(update_v, dict):
        raise typer.BadParameter(
            "must be a JSON object of step name to result", param_hint="--update"
        )
    if resume_value is not None or update_v is not None or goto:
        from langgraph.types import Command

        command = Command(
            resume=resume_v,
            update=update_v,
            goto=(goto[0] if len(goto) == 1 else list(goto)) if goto else (),
        )
    with _runner(db, thread_id, on_update=_printer()) as runner:
        runner.resume(
            thread_id,
            command,
            allow_changed_definition=allow_changed_definition,
            skip_pending=skip_pending,
            by=by,
        )
        raise typer.Exit(_finish(runner, thread_id))


@app.command()
def status(
    thread_id: Annotated[str, typer.Argument(metavar="THREAD", help="The thread.")],
    tree: Annotated[
        bool,
        typer.Option("--tree", help="Each sub-task's own sub-tasks too, to full depth."),
    ] = False,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Status, progress, the state of every step and what it cost.

    Each step's tokens, cost, model and tool calls, wall time and attempts; the totals; and
    what the budget has left (--json: ``usage`` of the thread and of each step). A sub-task
    step lists its child threads and their status; --tree lists theirs in turn (--json:
    ``subtasks`` by step, and with --tree each child's status under ``tree``)."""
    with _reader(db) as runner:
        st = runner.status(thread_id)
        if not tree:
            if json_:
                print(st.model_dump_json(indent=2))
            else:
                print_status(out, st, usage=True)
            return
        if json_:
            print(json.dumps(_status_tree(runner, st), indent=2, default=str))
            return
        print_status(out, st, usage=True, tree=lambda t: runner.status(t))


def _status_tree(runner: Any, st: Any) -> dict[str, Any]:
    """``st`` as JSON with each child's status, recursively, under its step's rows."""
    data: dict[str, Any] = json.loads(st.model_dump_json())
    for rows in data["subtasks"].values():
        for row in rows:
            row["tree"] = _status_tree(runner, runner.status(row["thread_id"]))
    return data


@app.command()
def result(
    thread_id: Annotated[str, typer.Argument(metavar="THREAD", help="The thread.")],
    step: Annotated[
        str | None, typer.Argument(help="Only this step's result [default: the final results].")
    ] = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Every step's result, not only the final ones.")
    ] = False,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """A thread's results: by default those of its last stage.

    The final results are the results of the steps of the task's last stage; before the
    thread completes, every result so far. STEP prints one step's result alone (a string
    as its text, so `longtask result T STEP > file` saves it); --all prints every step's.
    Text shows JSON with multi-line strings as text blocks; --json prints JSON (an object
    of step name to result, or the one result for STEP).
    """
    if step is not None and all_:
        raise typer.BadParameter("give a STEP or --all, not both", param_hint="--all")
    with _reader(db) as runner:
        if step is not None:
            value = runner.result(thread_id, step)
        else:
            st = runner.status(thread_id)
            found = runner.results(thread_id)
            final = st.status == "completed" and not all_
            last = st.steps[-1].stage if st.steps else None
            chosen = [s.name for s in st.steps if not final or s.stage == last]
            results = {name: found[name] for name in chosen if name in found}
    if step is not None:
        if json_:
            print(json.dumps(jsonable(value), indent=2, ensure_ascii=False))
        else:
            out.print(escape(render_text(value)))
        return
    if json_:
        print(json.dumps(jsonable(results), indent=2, ensure_ascii=False))
        return
    if st.status != "completed":
        out.print(f"thread {escape(thread_id)} is {st.status}; its results so far:")
    if not results:
        out.print("no results yet")
    for name, value in results.items():
        out.print(f"{escape(name)}: {escape(render(value))}")


@app.command("ls")
def list_threads(
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=MAX_INT, help="At most this many.")
    ] = 50,
    status_filter: Annotated[
        str | None,
        typer.Option("--status", metavar="STATUS", help="Only threads with this status."),
    ] = None,
    task: Annotated[
        str | None, typer.Option("--task", metavar="NAME", help="Only threads of this task.")
    ] = None,
    top: Annotated[
        bool, typer.Option("--top", help="Only top-level threads (no sub-tasks).")
    ] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Also the tokens and last update.")] = False,
    sort: Annotated[
        str,
        typer.Option(
            "--sort",
            metavar="ORDER",
            help="updated: most recently updated first; cost: most expensive first; "
            "age: oldest first.",
        ),
    ] = "updated",
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """List threads: status, cost and age.

    Most recently updated first; --sort cost puts the most expensive first, --sort age the
    oldest. Thread ids are never cut; --wide adds the tokens and last update; --top leaves
    out the child threads of sub-task steps.
    --json adds cost, tokens, tool_calls and age (seconds) to each thread."""
    from longtask.store import THREAD_SORTS, THREAD_STATUSES

    if status_filter is not None and status_filter not in THREAD_STATUSES:
        raise typer.BadParameter(
            f"must be one of {', '.join(THREAD_STATUSES)}", param_hint="--status"
        )
    if sort not in THREAD_SORTS:
        raise typer.BadParameter(f"must be one of {', '.join(THREAD_SORTS)}", param_hint="--sort")
    with _reader(db) as runner:
        threads = runner.threads_with_cost(
            limit=limit, status=status_filter, sort=sort, task=task, top=top
        )
    if json_:
        print(json.dumps([t.to_json() for t in threads], indent=2))
    else:
        print_threads(out, threads, wide=wide)


@app.command()
def events(
    thread_id: Annotated[str, typer.Argument(metavar="THREAD", help="The thread.")],
    kind: Annotated[
        list[str] | None,
        typer.Option("--kind", metavar="KIND", help="Only events of this kind (repeatable)."),
    ] = None,
    since: Annotated[
        int, typer.Option("--since", min=0, max=MAX_INT, help="Only events after this id.")
    ] = 0,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Keep printing new events as they are stored, until the thread completes, "
            "fails or is cancelled (Ctrl-C to stop earlier).",
        ),
    ] = False,
    json_: Annotated[bool, typer.Option("--json", help="JSON Lines, one event a line.")] = False,
    db: DbOpt = None,
) -> None:
    """A thread's event log, oldest first.

    A table, one event a line; --json prints JSON Lines."""
    from longtask.store._kinds import EVENT_KINDS

    unknown = [k for k in kind or () if k not in EVENT_KINDS]
    if unknown:
        raise typer.BadParameter(
            f"unknown event kind {', '.join(map(repr, unknown))}; the kinds are "
            f"{', '.join(EVENT_KINDS)}",
            param_hint="--kind",
        )

    def show(e: Event) -> None:
        if json_:
            print(json.dumps(e.to_json()), flush=True)
            return
        where = "/".join(p for p in (e.stage, e.step) if p)
        attempt = f" #{e.attempt}" if e.attempt else ""
        data = f" {json.dumps(e.data)}" if e.data else ""
        out.print(
            f"{e.id:>6} {e.ts:%Y-%m-%d %H:%M:%S} {escape(e.kind):<18} "
            f"{escape(where)}{attempt}{escape(data)}"
        )

    if follow:
        with _runner(db) as runner:
            try:
                for e in runner.follow(thread_id, since=since, kinds=kind):
                    show(e)
            except KeyboardInterrupt:
                raise typer.Exit(130) from None
            return
    with _reader(db) as reader:
        evs = reader.events(thread_id, since=since, kinds=kind)
    for e in evs:
        show(e)


@app.command()
def watch(
    thread_id: Annotated[str, typer.Argument(metavar="THREAD", help="The thread.")],
    quiet_after: Annotated[
        float,
        typer.Option(
            "--quiet-after",
            min=1,
            help="Warn when a running step has sent no event for this many seconds.",
        ),
    ] = 300,
    json_: Annotated[
        bool, typer.Option("--json", help="Print the events as JSON Lines instead of a view.")
    ] = False,
    db: DbOpt = None,
) -> None:
    """Watch a thread live until it completes, fails or pauses.

    Whichever process or machine advances it: stages, steps, progress, retries, what it
    waits for. Exits when it completes (0), fails (1) or pauses (3), like `run`."""
    from rich.live import Live

    from longtask.cli._watch import WatchState, render, waiting_lines

    with _runner(db) as runner:
        state = WatchState()
        try:
            if json_:
                for e in runner.follow(thread_id, stop_when_paused=True):
                    print(json.dumps(e.to_json()), flush=True)
            elif not out.is_terminal:
                # Piped to a file or `| tee`: a live view redraws in place, which only a
                # terminal shows; this prints a line per change as it happens, then the view.
                first = runner.status(thread_id, usage=False)
                out.print(f"thread {escape(thread_id)}: {first.status}, {_done_of(first)}")
                for e in runner.follow(thread_id, stop_when_paused=True):
                    state.add(e)
                    out.print(_change_line(e, runner.status(thread_id, usage=False)))
                last = runner.status(thread_id, usage=False)
                out.print(render(last, state, quiet_after, waiting=False))
                for line in waiting_lines(last):
                    out.print(escape(line))  # whole, however wide: these are pasted
            else:
                with Live(
                    render(runner.status(thread_id, usage=False), state, quiet_after),
                    console=out,
                    refresh_per_second=4,
                    transient=False,
                ) as live:
                    for e in runner.follow(thread_id, stop_when_paused=True):
                        state.add(e)
                        status = runner.status(thread_id, usage=False)
                        live.update(render(status, state, quiet_after))
                    last = runner.status(thread_id, usage=False)
                    live.update(render(last, state, quiet_after, waiting=False))
                if not out.is_terminal:
                    out.print()  # Live leaves its last line open when not on a terminal
                for line in waiting_lines(last):
                    out.print(escape(line))  # whole, however wide: these are pasted
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        raise typer.Exit(status_exit_code(runner.status(thread_id).status))


def _done_of(st: ThreadStatus) -> str:
    return f"{st.done}/{len(st.steps)} steps done"


def _change_line(e: Event, st: ThreadStatus) -> str:
    """One event as ``watch`` prints it when not on a terminal: when, what, where, and how
    far the thread is then."""
    where = "/".join(p for p in (e.stage, e.step) if p)
    attempt = f" #{e.attempt}" if e.attempt else ""
    return (
        f"{e.ts:%H:%M:%S} {escape(e.kind)} {escape(where)}{attempt}".rstrip()
        + f"  ({st.status}, {_done_of(st)})"
    )


@app.command()
def artifacts(
    args: Annotated[
        list[str],
        typer.Argument(
            metavar="THREAD | get THREAD NAME",
            help="List a thread's artifacts, or write one's content out.",
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="get: write to this file [default: stdout]."),
    ] = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """List a thread's artifacts, or write one out.

    Artifacts are reports, transcripts, patches: `artifacts THREAD` lists them;
    `artifacts get THREAD NAME [-o FILE]` writes one out."""
    if args and args[0] == "get":
        if len(args) != 3:
            raise typer.BadParameter("usage: longtask artifacts get THREAD NAME [-o FILE]")
        with _runner(db) as runner:
            data, _record = runner.artifact(args[1], args[2])
        if output is None:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        else:
            output.write_bytes(data)
        return
    if len(args) != 1:
        raise typer.BadParameter("usage: longtask artifacts THREAD, or artifacts get THREAD NAME")
    with _runner(db) as runner:
        rows = runner.artifacts(args[0])
    if json_:
        print(json.dumps([a.to_json() for a in rows], indent=2))
        return
    if not rows:
        out.print("no artifacts")
    for a in rows:
        out.print(
            f"{escape(a.name)}  {a.size} bytes  {escape(a.media_type or '')}  "
            f"step={escape(a.step or '-')}  {a.digest[:12]}"
        )


@db_app.command("upgrade")
def db_upgrade(db: DbOpt = None) -> None:
    """Create or migrate longtask's and LangGraph's tables."""
    from longtask.checkpointers import Database

    with Database.open(db, upgrade=False, verify=False) as database:
        done = database.upgrade()
        out.print(f"{database.url.redacted}: " + ("; ".join(done) or "already up to date"))


def _print_version(value: bool) -> None:
    if not value:
        return
    from longtask.cli._version import version_line

    out.print(version_line())
    raise typer.Exit(0)


@app.callback()
def _main(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the versions of longtask and LangGraph and exit.",
        ),
    ] = False,
) -> None:
    ctx.obj = {"debug": debug}


def main(argv: list[str] | None = None) -> None:
    """Run a command line on the commands registered so far: the one place that turns
    exceptions into messages and exit codes. The entry point is ``longtask.cli.main``,
    which first registers the command the line names (``cli._commands``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not {"serve", "worker"} & set(args[:1]):
        # (serve and worker stop on Ctrl-C their own way: requests, running threads)
        stop_on_ctrl_c(lambda: continue_hint(args))
    sys.exit(_dispatch(args))


def _only(args: list[str]) -> typer.Typer:
    """The app with only the command ``args`` names (or all when it names none it knows).

    Typer turns every command's signature into click parameters before it runs one; for
    ~40 commands that is a third of a read's cold start. The usage line, help and errors of
    the one command are the same either way; ``longtask --help`` and an unknown name (whose
    error suggests the near names) get every command."""
    name = args[0] if args and not args[0].startswith("-") else None
    if name is None:
        return _outline(app) if args in ([], ["--help"]) else app
    commands = [
        c
        for c in app.registered_commands
        if (c.name or typer.main.get_command_name(c.callback.__name__ if c.callback else ""))
        == name
    ]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    import copy

    one = copy.copy(app)
    one.registered_commands = commands
    one.registered_groups = groups
    return one


def _outline(typer_app: typer.Typer) -> typer.Typer:
    """``typer_app`` for its own help only: each command's name and docstring, without the
    parameters (which the list of commands does not show, and which cost typer most of
    ``longtask --help``: an ``inspect`` of every signature)."""
    import copy

    def bare(info: Any) -> Any:
        callback = info.callback
        if callback is None:
            return info

        def stub() -> None:  # pragma: no cover - never run, only listed
            raise AssertionError("an outline's command is listed, not run")

        stub.__name__ = callback.__name__
        stub.__doc__ = callback.__doc__
        listed = copy.copy(info)
        listed.callback = stub
        return listed

    def bare_group(info: Any) -> Any:
        if info.typer_instance is None:
            return info
        listed = copy.copy(info)
        listed.typer_instance = _outline(info.typer_instance)
        return listed

    outline = copy.copy(typer_app)
    outline.registered_commands = [bare(c) for c in typer_app.registered_commands]
    outline.registered_groups = [bare_group(g) for g in typer_app.registered_groups]
    return outline


def _dispatch(argv: list[str] | None) -> int:
    from longtask.errors import LongTaskError

    args = list(sys.argv[1:] if argv is None else argv)
    remember_db(args)
    # --debug is accepted anywhere on the line, not only before the command.
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    if not debug:
        # The driver's own warnings (a pooled connection the server closed, a pipeline
        # aborted by a refused write) are handled here; they would reach the user as bare
        # lines naming psycopg's classes. `longtask worker` configures logging itself.
        logging.getLogger("psycopg").setLevel(logging.ERROR)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if not debug and (args[:1] or [""])[0] not in ("serve", "worker"):
        # Long-running servers keep full tracebacks in their logs.
        one_line_warnings()
    if args == ["--version"]:
        # before building the commands: a version check (scripts, bug reports) needs none
        try:
            _print_version(True)
        except typer.Exit:
            return 0
    command = typer.main.get_command(_only(args))
    lost = False
    try:
        result = command.main(args=args, prog_name="longtask", standalone_mode=False)
        return int(result) if isinstance(result, int) else 0
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.TyperException as exc:  # usage errors: bad option, bad parameter
        show = getattr(exc, "show", None)
        if show:
            show()
        else:
            err.print(f"error: {escape(str(exc))}")
        return 2
    except typer.Abort:
        err.print("aborted")
        return 130
    except LongTaskError as exc:
        if debug:
            err.print_exception()
        # A refusal or failure the lost database caused: its line is the one that counts.
        lost = connection_lost(exc) is not None
        err.print(f"error: {escape(in_text(str(exc)))}")
        return exc.exit_code
    except (KeyboardInterrupt, Interrupted):
        reported.set()
        err.print(f"interrupted; {continue_hint(args)}")
        return 130
    except Exception as exc:
        if debug:
            err.print_exception()
        full = disk_full(exc)
        if full is not None:
            err.print(f"error: {escape(disk_full_message(full, args))}")
            return 1
        driver = connection_lost(exc)
        if driver is not None:
            lost = True
            err.print(f"error: {escape(lost_message(driver, args))}")
            return 1
        first = next((ln for ln in str(exc).splitlines() if ln.strip()), "")
        err.print(
            f"internal error: {escape(type(exc).__name__)}: {escape(scrub_env(first))}\n"
            "(run with --debug for the traceback)"
        )
        return 1
    finally:
        release_held(lost)
