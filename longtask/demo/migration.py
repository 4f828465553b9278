"""The migration LongTask: move a small service's authentication from sessions to JWT.

It works on a real git repository (the sample project in ``longtask/demo/sample``): analysis
(an agent reads the repository), design (an agent writes a plan), the plan's approval, code
(two agents in parallel editing files in a git worktree; every edit goes through the effect
ledger), verify (the project's tests in a subprocess, with a fix loop of at most 3 rounds),
ci (an outside event), the release's approval (showing the diff), docs (an agent writes
MIGRATION.md) and publish (a commit on the branch, a patch file, artifacts).

``task`` pauses for people (the two approvals) and for the CI callback (``signal ci``);
``longtask demo`` answers them through the Runner, asking or, with ``--yes``, by itself. It
uses the offline scripted model unless ``OPENAI_API_KEY`` is set.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from longtask import (
    EffectCall,
    InvalidInput,
    LongTask,
    Prompt,
    Stage,
    StepContext,
    agent_step,
    approval,
    current_context,
    fix_with,
    function_step,
    wait_for,
)
from longtask.demo._model import ScriptedChatModel
from longtask.demo._script import SCRIPT

BRANCH = "jwt-migration"


class Inputs(BaseModel):
    #: the git repository of the service
    repo: str
    #: where the migration branch is checked out (a git worktree)
    worktree: str
    #: where the demo keeps its own files: the offline model's log, the patch
    state_dir: str
    branch: str = BRANCH
    #: kill this process inside this step, once (``longtask demo --crash-at``)
    crash_at: str | None = None


class CiResult(BaseModel):
    status: str
    url: str | None = None


def _inputs() -> Inputs:
    value = current_context().inputs
    return value if isinstance(value, Inputs) else Inputs.model_validate(value)


def maybe_crash(step: str) -> None:
    """Die here, once, if the demo was asked to crash in this step."""
    inputs = _inputs()
    if inputs.crash_at != step:
        return
    marker = Path(inputs.state_dir) / f"crashed-in-{step}"
    if marker.exists():
        return
    marker.write_text(str(os.getpid()))
    _wait_until_started(inputs, step)
    # The demo continues the unfinished thread it finds in its directory.
    print(
        f"\n!! crashing on purpose inside step {step!r} (--crash-at)\n"
        f"!! continue with: longtask demo --dir {shlex.quote(str(Path(inputs.state_dir).parent))} "
        "--yes",
        flush=True,
    )
    os.kill(os.getpid(), signal.SIGKILL)


def _wait_until_started(inputs: Inputs, step: str, patience: float = 10.0) -> None:
    """Wait (up to ``patience`` seconds) until the step's ``step.started`` is stored. A
    running step's start is stored within a fraction of a second, not before its code runs
    (a chain of fast steps pays no write for it); a kill on the step's first line would
    leave no trace of the attempt it ends, and the demo shows how a crash is recorded:
    the next run's ``longtask.recovered`` names the abandoned attempt, the next is #2."""
    from longtask.runtime._reader import Reader

    ctx = current_context()
    db = Path(inputs.state_dir) / "longtask.db"
    if not db.exists():
        return
    deadline = time.monotonic() + patience
    with Reader(f"sqlite:///{db}") as reader:
        while time.monotonic() < deadline:
            started = reader.events(ctx.thread_id, kinds=["step.started"])
            if any(e.step == step and e.attempt == ctx.attempt for e in started):
                return
            time.sleep(0.05)


# -- the agents' tools (they act on the worktree of the thread's inputs) -------------------


def _path(path: str) -> Path:
    root = Path(_inputs().worktree).resolve()
    target = (root / path).resolve()
    if root != target and root not in target.parents:
        raise InvalidInput(f"{path!r} is outside the repository; use a path relative to it")
    return target


def list_files() -> str:
    """List the repository's files, one path per line."""
    root = Path(_inputs().worktree)
    files = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.parts and "__pycache__" not in p.parts
    )
    return "\n".join(files)


def read_file(path: str) -> str:
    """Read a file of the repository (a path relative to its root)."""
    target = _path(path)
    if not target.is_file():
        raise InvalidInput(f"no file {path!r}; list the files first")
    return target.read_text()


def write_file(path: str, content: str) -> str:
    """Write a file of the repository (a path relative to its root), replacing it."""
    maybe_crash(current_context().step)
    target = _path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    return f"wrote {path} ({len(content)} bytes)"


def delete_file(path: str) -> str:
    """Delete a file of the repository (a path relative to its root)."""
    maybe_crash(current_context().step)
    target = _path(path)
    if target.is_file():
        target.unlink()
    return f"deleted {path}"


def demo_model() -> Any:
    """A real model when OPENAI_API_KEY is set (OPENAI_BASE_URL and LONGTASK_MODEL apply),
    else the offline scripted one."""
    if os.environ.get("OPENAI_API_KEY"):
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model=os.environ.get("LONGTASK_MODEL") or "gpt-4o-mini", max_retries=0)
    log = Path(_inputs().state_dir) / "model-requests.jsonl"
    return ScriptedChatModel(script=SCRIPT, log_path=str(log))


# -- git ----------------------------------------------------------------------------------


def git(repo: str, *args: str) -> str:
    done = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def _add_worktree(repo: str, worktree: str, branch: str) -> dict[str, str]:
    git(repo, "worktree", "add", "-b", branch, worktree, "main")
    return {"worktree": worktree, "branch": branch}


def commit_all(worktree: str, message: str) -> str:
    """Commit everything in ``worktree`` (as the demo's own author); returns the commit."""
    git(worktree, "add", "-A")
    git(
        worktree,
        "-c",
        "user.name=longtask demo",
        "-c",
        "user.email=demo@longtask.invalid",
        "commit",
        "-q",
        "-m",
        message,
    )
    return git(worktree, "rev-parse", "HEAD").strip()


def _diff(worktree: str) -> str:
    git(worktree, "add", "-A")
    return git(worktree, "diff", "--cached", "--stat", "main")


# -- steps ---------------------------------------------------------------------------------


def prepare(ctx: StepContext) -> dict[str, str]:
    maybe_crash("prepare")
    inputs: Inputs = ctx.inputs

    def existing(call: EffectCall) -> dict[str, str] | None:
        return (
            {"worktree": inputs.worktree, "branch": inputs.branch}
            if Path(inputs.worktree).exists()
            else None
        )

    result: dict[str, str] = ctx.effect(
        "worktree", _add_worktree, inputs.repo, inputs.worktree, inputs.branch, reconcile=existing
    )
    return result


class TestsFailed(Exception):
    """The project's tests fail (the output's tail is the message)."""


_MINI_RUNNER = """
import importlib.util, pathlib, sys, traceback
sys.path.insert(0, '.')
failed = 0
for path in sorted(pathlib.Path('tests').glob('test_*.py')):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
    for name in sorted(n for n in dir(module) if n.startswith('test_')):
        try:
            getattr(module, name)()
            print('PASSED', path.name, name)
        except Exception:
            failed += 1
            print('FAILED', path.name, name); traceback.print_exc()
sys.exit(1 if failed else 0)
"""


def verify(ctx: StepContext) -> dict[str, Any]:
    """Run the project's tests in a subprocess (pytest if installed)."""
    maybe_crash("verify")
    worktree = ctx.inputs.worktree
    try:
        import pytest  # noqa: F401

        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    except ImportError:
        command = [sys.executable, "-c", _MINI_RUNNER]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(command, cwd=worktree, capture_output=True, text=True, env=env)
    output = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise TestsFailed(output[-3000:])
    return {"passed": True, "summary": output.splitlines()[-1] if output else ""}


def publish(ctx: StepContext) -> dict[str, Any]:
    maybe_crash("publish")
    inputs: Inputs = ctx.inputs
    sha = ctx.effect("commit", commit_all, inputs.worktree, "Move authentication to JWT")
    patch = git(inputs.repo, "format-patch", "--stdout", f"main..{inputs.branch}")
    patch_path = Path(inputs.state_dir).parent / "migration.patch"
    patch_path.write_text(patch)
    migration = Path(inputs.worktree) / "MIGRATION.md"
    refs = {
        "patch": ctx.artifact("migration.patch", patch, media_type="text/x-diff"),
        "migration": ctx.artifact("MIGRATION.md", path=migration, media_type="text/markdown"),
    }
    return {
        "branch": inputs.branch,
        "commit": sha,
        "worktree": inputs.worktree,
        "patch_file": str(patch_path),
        "migration_file": str(migration),
        "artifacts": refs,
    }


def _plan(ctx: StepContext) -> dict[str, Any]:
    return {"design": ctx.result("design")}


def _release_plan(ctx: StepContext) -> dict[str, Any]:
    return {"diff": _diff(ctx.inputs.worktree), "tests": ctx.result("verify")}


def _agent(name: str, version: str, system: str, template: str, **kw: Any) -> Any:
    prompt = Prompt(
        name=name, version=version, system=f"{system} (agent: {name})", template=template
    )
    return agent_step(name, prompt=prompt, model=demo_model, **kw)


READ = [list_files, read_file]
EDIT = [list_files, read_file, write_file, delete_file]
READ_ONLY = ["list_files", "read_file"]


def build() -> LongTask:
    analysis = _agent(
        "analysis",
        "1",
        "You analyse a Python service's authentication.",
        "Find where {inputs.repo} keeps sessions and what uses them.",
        tools=READ,
        read_only_tools=READ_ONLY,
    )
    design = _agent(
        "design",
        "1",
        "You design code migrations.",
        "Write a step-by-step plan to move this service from sessions to JWT.\n\n{analysis}",
    )
    backend = _agent(
        "backend",
        "1",
        "You change the authentication modules.",
        "Carry out the backend part of this plan:\n{design}",
        tools=EDIT,
        read_only_tools=READ_ONLY,
    )
    api = _agent(
        "api",
        "1",
        "You change the API layer.",
        "Carry out the API part of this plan:\n{design}",
        tools=EDIT,
        read_only_tools=READ_ONLY,
    )
    fixer = _agent(
        "fix_tests",
        "1",
        "You fix failing tests by fixing the code.",
        "Fix round {round}. The tests fail:\n{failure}",
        tools=EDIT,
        read_only_tools=READ_ONLY,
    )
    docs = _agent(
        "docs",
        "1",
        "You write migration notes.",
        "Write MIGRATION.md for this change:\n{design}",
        tools=EDIT,
        read_only_tools=READ_ONLY,
    )
    return LongTask(
        "jwt_migration",
        version="1",
        inputs=Inputs,
        description="Move authsvc's authentication from sessions to JWT",
        stages=[
            Stage("setup", [function_step(prepare, name="prepare")]),
            Stage("analysis", [analysis]),
            Stage("design", [design]),
            Stage("plan_approval", [approval("approve_plan", plan=_plan)]),
            Stage("code", [backend, api]),
            Stage(
                "verify",
                [function_step(verify, name="verify", on_failure=fix_with(fixer, max_rounds=3))],
            ),
            Stage("ci", [wait_for("ci", schema=CiResult)]),
            Stage("release_approval", [approval("approve_release", plan=_release_plan)]),
            Stage("docs", [docs]),
            Stage("publish", [function_step(publish, name="publish")]),
        ],
    )


task = build()
