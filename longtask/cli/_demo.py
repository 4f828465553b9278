"""``longtask demo``: the migration LongTask on a fresh sample repository, end to end."""

from __future__ import annotations

import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from longtask.cli._app import _printer, app, out
from longtask.cli._output import print_status


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


@app.command()
def demo(
    dir: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            help="Where to put the sample repository and the database [default: "
            "./longtask-demo, or -2, -3... if taken].",
        ),
    ] = None,
    crash_at: Annotated[
        str | None,
        typer.Option(
            "--crash-at",
            metavar="STEP",
            help="Kill this process inside STEP (then continue with the printed `longtask "
            "resume`); implies --yes.",
        ),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="Approve every approval and simulate CI unattended.")
    ] = False,
    model: Annotated[
        str | None, typer.Option("--model", help="Model for a real run (with OPENAI_API_KEY).")
    ] = None,
) -> None:
    """The migration demo: a sample service from sessions to JWT.

    Agents analyse, design, edit a git worktree and fix the tests; you approve the plan
    and the release; CI is simulated."""
    from longtask.demo.migration import Inputs, auto_task, task
    from longtask.runtime import Runner

    auto = yes or crash_at is not None
    chosen = auto_task if auto else task
    if crash_at is not None and crash_at not in chosen.steps:
        raise typer.BadParameter(
            f"no step {crash_at!r}; steps: {', '.join(chosen.steps)}", param_hint="--crash-at"
        )
    if model:
        os.environ["LONGTASK_MODEL"] = model
    if dir is None:
        dir = Path("longtask-demo")
        n = 2
        while (dir / "authsvc").exists():
            dir = Path(f"longtask-demo-{n}")
            n += 1
    root = dir.resolve()
    repo, worktree, state = root / "authsvc", root / "authsvc-jwt", root / ".longtask"
    if repo.exists():
        raise typer.BadParameter(
            f"{root} already holds a demo; choose another --dir or remove it", param_hint="--dir"
        )
    if os.environ.get("OPENAI_API_KEY"):
        name = os.environ.get("LONGTASK_MODEL") or "gpt-4o-mini"
        out.print(f"model: {escape(name)} (OPENAI_API_KEY is set)")
    else:
        out.print(
            "model: the offline demo model (scripted, no network). To use a real one, set "
            "OPENAI_API_KEY (and OPENAI_BASE_URL for an OpenAI-compatible server) and pass "
            "--model NAME."
        )
    state.mkdir(parents=True, exist_ok=True)
    _make_repo(repo)
    db = f"sqlite:///{state / 'longtask.db'}"
    thread = f"migration-{uuid.uuid4().hex[:8]}"
    ref = "longtask.demo.migration:" + ("auto_task" if auto else "task")
    inputs = Inputs(repo=str(repo), worktree=str(worktree), state_dir=str(state), crash_at=crash_at)
    out.print(f"sample repository: {repo}")
    out.print(f"thread {thread} (database {db})")
    interactive = sys.stdin.isatty() and not auto
    with Runner(db, on_update=_printer()) as runner:
        runner.start(chosen, inputs, thread_id=thread, task_ref=ref)
        while True:
            status = runner.status(thread)
            if status.status == "completed":
                break
            if status.status not in ("waiting_user", "waiting_external"):
                print_status(out, status)
                raise typer.Exit(1)
            for item in runner.pending(thread, task=chosen):
                if item.kind == "wait":
                    out.print("waiting for CI: the simulated CI callback arrives in 2 s")
                    time.sleep(2)
                    runner.signal(thread, "ci", {"status": "passed", "url": "https://ci.invalid/1"})
                    break
                out.print(f"\n[bold]approval {escape(item.step)}[/bold]")
                _show_plan(item.request.get("plan"))
                if not interactive:
                    out.print(
                        f"waiting for your decision; approve with:\n  longtask approve {thread} "
                        f"{item.step} --by YOUR_NAME --db {db}"
                    )
                    raise typer.Exit(3)
                if _ask(f"approve {item.step}?"):
                    runner.approve(thread, item.step, by=os.environ.get("USER") or "you")
                else:
                    runner.reject(thread, item.step, by=os.environ.get("USER") or "you")
                break
        print_status(out, runner.status(thread))
        result: dict[str, Any] = runner.result(thread, "publish")
    out.print(f"\nbranch:       {result['branch']} (checked out in {result['worktree']})")
    out.print(f"patch:        {result['patch_file']}")
    out.print(f"MIGRATION.md: {result['migration_file']}")
    out.print(f"events:       longtask events {thread} --db {db}")


def _show_plan(plan: Any) -> None:
    from longtask.cli._values import render_text

    if isinstance(plan, dict):
        for key, value in plan.items():
            out.print(f"[bold]{escape(str(key))}[/bold]:")
            out.print(escape(render_text(value)))
    else:
        out.print(escape(render_text(plan)))
