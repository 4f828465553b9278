"""The README's first command works from a fresh directory with no configuration: no
``$LONGTASK_DB``, so the embedded SQLite default ``.longtask/longtask.db`` is created in the
working directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from longtask import Runner

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"


def _longtask(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LONGTASK_DB"}
    return subprocess.run(
        [sys.executable, "-m", "longtask", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_quickstart_runs_with_the_default_database(tmp_path: Path) -> None:
    assert QUICKSTART.is_file()
    thread = "quickstart-1"
    ran = _longtask(
        "run",
        f"{QUICKSTART}:task",
        "--thread",
        thread,
        "--input",
        json.dumps({"topic": "durable agents"}),
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"thread {thread} completed" in ran.stdout
    db_file = tmp_path / ".longtask" / "longtask.db"
    assert db_file.is_file()

    shown = _longtask("status", thread, "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["thread_id"] == thread
    assert status["task_name"] == "quickstart"
    assert status["status"] == "completed"
    assert [s["name"] for s in status["steps"]] == ["outline", "research", "examples", "write"]
    assert {s["state"] for s in status["steps"]} == {"completed"}

    with Runner(f"sqlite:///{db_file}") as runner:
        report = runner.result(thread, "write")
    assert report.startswith("# Notes on durable agents")
    assert report.count("## durable agents: part") == 3
