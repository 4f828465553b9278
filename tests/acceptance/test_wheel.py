"""Installing into your own project: the wheel a user would build installs into a clean
virtualenv (not editable, dependencies from the package registry or pip's cache), and from
a directory of its own `longtask --help`, the demo and a small task work.

An editable install hides missing package data (the checkout is on the path); a wheel
built from the files git knows, installed elsewhere, does not. Slow (a virtualenv and its
dependencies: a couple of minutes), and it needs the package registry or a warm pip cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TASK = """
from pydantic import BaseModel

from longtask import LongTask, Stage, StepContext, function_step


class Inputs(BaseModel):
    name: str


@function_step
def greet(ctx: StepContext) -> str:
    return f"hello, {ctx.inputs.name}"


@function_step
def shout(ctx: StepContext) -> str:
    return ctx.result("greet").upper()


task = LongTask(
    "greeting", inputs=Inputs, stages=[Stage("greet", [greet]), Stage("shout", [shout])]
)
"""


def _run(
    args: list[str], cwd: Path, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _source_copy(into: Path) -> Path:
    """The files git knows (tracked, or new and not ignored), as a fresh clone has them:
    nothing built or left over in the checkout can slip into the wheel."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def _install(base: Path) -> tuple[Path, Path, dict[str, str]]:
    """(the wheel, the virtualenv's bin directory, an environment to run it in)."""
    source = _source_copy(base / "src")
    env = {k: v for k, v in os.environ.items() if k not in ("LONGTASK_DB", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(base / "dist")], source, env)
    [wheel] = (base / "dist").glob("langgraph_longtask-*.whl")
    _run([sys.executable, "-m", "venv", str(base / "venv")], base, env)
    bin_dir = base / "venv" / "bin"
    _run([str(bin_dir / "pip"), "install", "-q", str(wheel)], base, env)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return wheel, bin_dir, env


def test_built_wheel_installs_and_runs_in_a_clean_virtualenv(tmp_path: Path) -> None:
    """One test, so that one wheel and one virtualenv serve every check (pytest-xdist would
    build one per worker for a fixture shared by several tests)."""
    if shutil.which("git") is None:
        pytest.skip("needs git to list the source files (and the demo edits a git worktree)")
    wheel, bin_dir, env = _install(tmp_path / "build")
    _check_wheel_contents(wheel)
    _check_a_task_runs_from_its_own_directory(bin_dir, env, tmp_path)
    _check_the_demo_runs(bin_dir, env, tmp_path)


def _check_wheel_contents(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(
        ["git", "ls-files", "longtask"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    missing = [n for n in tracked if n not in names and "__pycache__" not in n]
    assert not missing, f"the wheel lacks {missing}: add them to pyproject's package-data"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)[-8:]
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "License-Expression: MIT" in text


def _check_a_task_runs_from_its_own_directory(
    bin_dir: Path, env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "myproject"
    project.mkdir()
    # the installed package, not the checkout
    where = _run(
        [str(bin_dir / "python"), "-c", "import longtask; print(longtask.__file__)"], project, env
    ).stdout
    assert str(bin_dir.parent) in where and str(ROOT) not in where
    helped = _run([str(bin_dir / "longtask"), "--help"], project, env).stdout
    for command in ("run", "resume", "demo", "serve", "worker"):
        assert f" {command} " in helped

    (project / "tasks.py").write_text(TASK)
    ran = _run(
        [
            str(bin_dir / "longtask"),
            "run",
            "tasks.py:task",
            "--thread",
            "g1",
            "--input",
            '{"name": "you"}',
        ],
        project,
        env,
    )
    assert "thread g1 completed" in ran.stdout
    result = _run([str(bin_dir / "longtask"), "result", "g1", "--json"], project, env).stdout
    assert json.loads(result) == {"shout": "HELLO, YOU"}
    assert (project / ".longtask" / "longtask.db").is_file()


def _check_the_demo_runs(bin_dir: Path, env: dict[str, str], tmp_path: Path) -> None:
    """The demo's sample project is package data: it must be in the wheel for this to run."""
    env = {k: v for k, v in env.items() if not k.startswith("OPENAI_")}  # the offline model
    demo = _run(
        [str(bin_dir / "longtask"), "demo", "--yes", "--dir", str(tmp_path / "demo")],
        tmp_path,
        env,
    )
    assert "completed: 11 steps" in demo.stdout, demo.stdout[-2000:]
