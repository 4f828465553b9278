"""Issue 45's papercuts, each checked in new processes of the real CLI: what a newcomer
met in the first hour and what they should have met instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import run_cli

HERE = Path(__file__).resolve().parent
TASK = f"{HERE / 'papercuts_task.py'}:task"


def test_a_closed_stdout_does_not_fail_the_thread(tmp_path: Path) -> None:
    """``longtask run … | head -1``: the reader goes away after the first line; the next
    line the run prints (a finished step) meets a broken pipe. The thread still completes
    (rich's default would end the process with SystemExit inside the run, failing the
    thread "in step None"), and stderr says why nothing more was printed."""
    url = f"sqlite:///{tmp_path / 'pipe.db'}"
    go = tmp_path / "go"
    proc = subprocess.Popen(
        [sys.executable, "-m", "longtask", "run", TASK, "--thread", "pipe", "--db", url],
        env={**os.environ, "LT_PC_GO": str(go)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    assert first.startswith("thread pipe: papercuts v1"), first
    proc.stdout.close()  # as head -1 does: every later write fails with EPIPE
    go.touch()
    code = proc.wait(timeout=120)
    err = proc.stderr.read()
    assert code == 0, err
    assert "standard output was closed; thread pipe runs on without printing" in err, err
    assert "sys.exit" not in err
    status = run_cli("status", "pipe", "--json", db=url)
    assert '"status": "completed"' in status.stdout, status.stdout + status.stderr
