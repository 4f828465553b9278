"""``longtask demo``: the migration LongTask on a fresh sample repository, end to end.

The demo runs the one migration task, with its approvals and its CI wait. It answers them
through the Runner as anyone would (``approve``/``reject``, ``signal``): asking at the
terminal, or, with ``--yes``, deciding by itself, recorded as ``demo --yes``. Run again on
the same ``--dir`` it continues the unfinished demo there (after ``--crash-at``).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from longtask.cli._app import app, out
from longtask.cli._hints import use_db
from longtask.cli._output import plural

if TYPE_CHECKING:
    from longtask._runner import Runner
    from longtask.model import LongTask

#: who decides the approvals and delivers the CI event with --yes (in the events' ``by``)
AUTO = "demo --yes"
#: the simulated CI run: its callback arrives this long after the wait starts
CI_SECONDS = 1.0


def _make_repo(repo: Path) -> None:
    """The sample project, as a git repository with one commit on main."""
    from longtask.demo.migration import commit_all, git

    sample = Path(__file__).resolve().parent.parent / "demo" / "sample"
    shutil.copytree(sample, repo, ignore=shutil.ignore_patterns("__pycache__"))
    git(str(repo), "init", "-q", "-b", "main")
    commit_all(str(repo), "authsvc with sessions")


def _ask(question: str) -> bool:
    answer = typer.prompt(f"{question} [y/N]", default="n", show_default=False)
    return answer.strip().lower() in ("y", "yes")


def _printer(task: LongTask, db: str) -> Any:
    """Prints each finished step under its stage, as they finish: the demo's one view. A
    step that got there through fix rounds shows each: the failure, and the agent's round
    (the best moment of the demo: the tests fail and the agent fixes the code)."""
    stage_of = {step.name: stage.name for stage in task.stages for step in stage.steps}
    last: list[str | None] = [None]

    def on_update(thread_id: str, steps: list[str]) -> None:
        for step in steps:
            stage = stage_of.get(step, "")
            if stage != last[0]:
                out.print(f"[bold]{escape(stage)}[/bold]")
                last[0] = stage
            rounds = _fix_rounds(db, thread_id, step)
            for data in rounds:
                out.print(f"  [red]✗[/red] {escape(step)}: {escape(_failure_line(data))}")
                out.print(
                    f"    [yellow]fix round {data.get('round')} of {data.get('max_rounds')}"
                    f"[/yellow]: the {escape(str(data.get('agent')))} agent changes the code, "
                    f"then {escape(step)} runs again"
                )
            after = f" (after {plural(len(rounds), 'fix round')})" if rounds else ""
            out.print(f"  [green]✓[/green] {escape(step)}{after}")

    return on_update


def _fix_rounds(db: str, thread_id: str, step: str) -> list[dict[str, Any]]:
    from longtask.runtime import Reader

    with Reader(db) as reader:
        events = reader.events(thread_id, kinds=["fix.round"])
    return [dict(e.data) for e in events if e.step == step]


def _failure_line(data: dict[str, Any]) -> str:
    """The failing test, from the tail of the test run's output."""
    lines = [line.strip() for line in str(data.get("failure") or "").splitlines()]
    lines = [line for line in lines if line and not line.startswith(("=", "_"))]
    # pytest's short summary (FAILED path::test - why), else the plain runner's lines
    for pick in (
        lambda line: line.startswith("FAILED "),
        lambda line: "FAIL" in line,
        lambda line: "Error" in line or "assert" in line,
    ):
        named = [line for line in lines if pick(line)]
        if named:
            break
    line = (named or lines or ["the tests failed"])[0]
    return line if len(line) <= 160 else line[:159] + "…"


def _unfinished(db: str, root: Path) -> tuple[str, str]:
    """The thread of the demo in ``root`` and its status (refuses a cancelled one)."""
    from longtask.runtime import Reader

    with Reader(db) as reader:
        threads = [t for t in reader.threads() if t.task_name == "jwt_migration"]
    if not threads:
        raise typer.BadParameter(
            f"{root} holds files but no demo thread; choose another --dir or remove it",
            param_hint="--dir",
        )
    rec = threads[0]
    if rec.status == "cancelled":
        raise typer.BadParameter(
            f"{root} already holds a {rec.status} demo (thread {rec.thread_id}); choose another "
            "--dir or remove it",
            param_hint="--dir",
        )
    return rec.thread_id, rec.status


def _summary(runner: Runner, thread: str, db: str) -> None:
    """What the finished demo did and where its outputs are."""
    status = runner.status(thread)
    result: dict[str, Any] = runner.result(thread, "publish")
    rounds = sum(s.fix_rounds or 0 for s in status.steps)
    out.print(
        f"\nthread {thread} completed: {plural(len(status.steps), 'step')}, "
        f"{plural(rounds, 'fix round')}"
    )
    out.print(f"branch:       {result['branch']} (checked out in {result['worktree']})")
    out.print(f"patch:        {result['patch_file']}")
    out.print(f"MIGRATION.md: {result['migration_file']}")
    out.print(f"events:       longtask events {thread} --db {shlex.quote(db)}")


@app.command()
def demo(
    dir: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            help="Where to put the sample repository and the database [default: a new "
            "temporary directory]. A directory holding an unfinished demo: continue it.",
        ),
    ] = None,
    crash_at: Annotated[
        str | None,
        typer.Option(
            "--crash-at",
            metavar="STEP",
            help="Kill this process inside STEP (then continue with the printed `longtask "
            "demo --dir ...`); implies --yes.",
        ),
    ] = None,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", help="Approve every approval and deliver the simulated CI result unattended."
        ),
    ] = False,
    model: Annotated[
        str | None, typer.Option("--model", help="Model for a real run (with OPENAI_API_KEY).")
    ] = None,
) -> None:
    """The migration demo: a sample service from sessions to JWT.

    Agents analyse, design, edit a git worktree and fix the tests; you approve the plan
    and the release; CI is simulated."""
    from longtask._runner import Runner
    from longtask.demo.migration import Inputs, task

    auto = yes or crash_at is not None
    if crash_at is not None and crash_at not in task.steps:
        raise typer.BadParameter(
            f"no step {crash_at!r}; steps: {', '.join(task.steps)}", param_hint="--crash-at"
        )
    if model:
        os.environ["LONGTASK_MODEL"] = model
    root = (dir or Path(tempfile.mkdtemp(prefix="longtask-demo-"))).resolve()
    repo, worktree, state = root / "authsvc", root / "authsvc-jwt", root / ".longtask"
    db = f"sqlite:///{state / 'longtask.db'}"
    thread: str | None = None
    # Every command the demo prints (a step's, a pause's) runs against the demo's database.
    use_db(db)
    if (state / "longtask.db").exists():
        thread, was = _unfinished(db, root)
        if was == "completed":
            # (the last approval, given with the printed `longtask approve`, finished it)
            out.print(f"demo directory: {root} holds a completed demo")
            with Runner(db) as runner:
                _summary(runner, thread, db)
            return
        if crash_at is not None:
            raise typer.BadParameter(
                f"{root} holds an unfinished demo (thread {thread}), which is continued without "
                "--crash-at; leave it out, or choose another --dir",
                param_hint="--crash-at",
            )
    elif repo.exists():
        raise typer.BadParameter(
            f"{root} already holds a demo; choose another --dir or remove it", param_hint="--dir"
        )
    out.print(f"demo directory: {root}" + ("" if dir else " (choose another with --dir)"))
    if os.environ.get("OPENAI_API_KEY"):
        name = os.environ.get("LONGTASK_MODEL") or "gpt-4o-mini"
        out.print(f"model: {escape(name)} (OPENAI_API_KEY is set)")
    else:
        out.print(
            "model: the offline demo model (scripted, no network). To use a real one, set "
            "OPENAI_API_KEY (and OPENAI_BASE_URL for an OpenAI-compatible server) and pass "
            "--model NAME."
        )
        out.print(f"model requests are logged to {state / 'model-requests.jsonl'}")
    interactive = sys.stdin.isatty() and not auto
    with Runner(db, on_update=_printer(task, db)) as runner:
        if thread is None:
            state.mkdir(parents=True, exist_ok=True)
            _make_repo(repo)
            thread = f"migration-{uuid.uuid4().hex[:8]}"
            inputs = Inputs(
                repo=str(repo), worktree=str(worktree), state_dir=str(state), crash_at=crash_at
            )
            out.print(f"sample repository: {repo}")
            out.print(f"thread {thread} (database {db})")
            runner.start(task, inputs, thread_id=thread, task_ref="longtask.demo.migration:task")
        else:
            out.print(f"continuing thread {thread} (database {db})")
            if runner.status(thread).status not in ("waiting_user", "waiting_external"):
                runner.resume(thread)
        _answer_until_done(runner, task, thread, root, db, auto=auto, interactive=interactive)
        _summary(runner, thread, db)


def _answer_until_done(
    runner: Runner,
    task: LongTask,
    thread: str,
    root: Path,
    db: str,
    *,
    auto: bool,
    interactive: bool,
) -> None:
    """Answer the thread's approvals and its CI wait through the Runner until it completes."""
    from longtask.cli._output import print_status
    from longtask.runtime._who import whoami

    while True:
        status = runner.status(thread)
        if status.status == "completed":
            return
        if status.status not in ("waiting_user", "waiting_external"):
            print_status(out, status)
            raise typer.Exit(1)
        for item in runner.pending(thread, task=task):
            if item.kind == "effect":
                # A side effect cut off by a crash: only a person knows whether it happened.
                print_status(out, status)
                again = f"longtask demo --dir {shlex.quote(str(root))}" + (" --yes" if auto else "")
                out.print(f"then continue the demo: {again}")
                raise typer.Exit(3)
            if item.kind == "wait":
                out.print(f"waiting for CI: the simulated CI callback arrives in {CI_SECONDS:g} s")
                time.sleep(CI_SECONDS)
                ci = {"status": "passed", "url": "https://ci.invalid/authsvc/jwt-migration/1"}
                runner.signal(thread, item.step, ci, by=AUTO if auto else "simulated CI")
                break
            out.print(f"\n[bold]approval {escape(item.step)}[/bold]")
            _show_plan(item.request.get("plan"))
            if auto:
                out.print(f"approved by {AUTO}")
                runner.approve(thread, item.step, by=AUTO, task=task)
                break
            if not interactive:
                out.print(
                    f"waiting for your decision; approve with:\n  longtask approve {thread} "
                    f"{item.step} --by YOUR_NAME --db {shlex.quote(db)}\nthen see the demo "
                    "through (it simulates CI, and says where the outputs are once the thread "
                    f"is done):\n  longtask demo --dir {shlex.quote(str(root))}"
                )
                raise typer.Exit(3)
            if _ask(f"approve {item.step}?"):
                runner.approve(thread, item.step, by=whoami(), task=task)
            else:
                runner.reject(thread, item.step, by=whoami(), task=task)
            break
        else:
            print_status(out, status)
            raise typer.Exit(3)


def _show_plan(plan: Any) -> None:
    from longtask.cli._values import render_text

    if isinstance(plan, dict):
        for key, value in plan.items():
            out.print(f"[bold]{escape(str(key))}[/bold]:")
            out.print(escape(render_text(value)))
    else:
        out.print(escape(render_text(plan)))
