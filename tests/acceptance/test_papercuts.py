"""Issue 45's papercuts, each checked in new processes of the real CLI: what a newcomer
met in the first hour and what they should have met instead."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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


WAITS = """\
from longtask import LongTask, Stage, function_step, wait_for


@function_step
def a(ctx):
    return 1


task = LongTask("drift_wait", stages=[Stage("one", [a]), Stage("ci", [wait_for("ci")])])
"""


def test_a_definition_change_refusal_names_commands_that_exist(tmp_path: Path) -> None:
    """``signal`` on a thread whose definition changed (same version number) is refused
    with commands that work: ``longtask migrate`` (pasted: a plan that says which
    definitions it moves between, not "from version 1 to 1") and ``longtask resume
    --allow-changed-definition`` — not an option ``signal`` does not have."""
    url = f"sqlite:///{tmp_path / 'drift.db'}"
    task_file = tmp_path / "drift_task.py"
    task_file.write_text(WAITS)
    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    paused = run_cli("run", f"{task_file}:task", "--thread", "dw", db=url, env=env)
    assert paused.returncode == 3, paused.stdout + paused.stderr
    task_file.write_text(WAITS.replace('Stage("one", [a])', 'Stage("first", [a])'))
    refused = run_cli("signal", "dw", "ci", "--db", url, db="", env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    err = " ".join(refused.stderr.split())
    migrate = f"longtask migrate dw --db {url} --to 1 --by NAME --dry-run"
    assert f"`{migrate}`" in err, err
    assert f"`longtask resume dw --db {url} --allow-changed-definition`" in err, err
    assert "signal" not in err, err
    plan = run_cli(*migrate.replace("NAME", "alice").split()[1:], db="", env=env)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    first = plan.stdout.splitlines()[0]
    assert first.startswith("thread dw: would move from version 1 (definition "), first
    assert ") to version 1 (definition " in first, first
    moved = run_cli(*migrate.replace("NAME", "alice").split()[1:-1], db="", env=env)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    done = run_cli("signal", "dw", "ci", "--db", url, db="", env=env)
    assert done.returncode == 0, done.stdout + done.stderr


def _read_until(stream: Any, text: str, seconds: float) -> str:
    """What ``stream`` printed until it holds ``text`` (fails after ``seconds``); read in
    raw chunks, so output without a newline cannot hang the test."""
    got = b""
    deadline = time.monotonic() + seconds
    while text.encode() not in got:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([stream], [], [], max(left, 0))
        assert ready, f"{text!r} not printed within {seconds}s; printed: {got!r}"
        chunk = os.read(stream.fileno(), 65536)
        assert chunk, f"output ended without {text!r}: {got!r}"
        got += chunk
    return got.decode()


def test_watch_piped_prints_a_line_per_change_as_it_happens(tmp_path: Path) -> None:
    """``watch`` piped to a file or ``| tee`` printed nothing until the thread ended (a
    live view redraws in place, which only a terminal shows): it prints a line per change
    as it happens. The thread's second step waits for a file; the lines about its first
    step must arrive before that file exists."""
    url = f"sqlite:///{tmp_path / 'watch.db'}"
    go = tmp_path / "go"
    env = {**os.environ, "LT_PC_GO": str(go)}
    run = subprocess.Popen(
        [sys.executable, "-m", "longtask", "run", TASK, "--thread", "w", "--db", url],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    watch = None
    try:
        deadline = time.monotonic() + 60
        while "step.started" not in run_cli("events", "w", "--kind", "step.started", db=url).stdout:
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.1)
        watch = subprocess.Popen(
            [sys.executable, "-m", "longtask", "watch", "w", "--db", url],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert watch.stdout is not None
        seen = _read_until(watch.stdout, "step.completed one/first", 30)
        assert seen.startswith("thread w: running"), seen
        assert not go.exists() and run.poll() is None  # the thread has not ended
        go.touch()
        rest = _read_until(watch.stdout, "longtask.completed", 60)
        assert watch.wait(60) == 0, rest
    finally:
        go.touch()
        run.wait(120)
        if watch is not None and watch.poll() is None:
            watch.kill()


def test_history_says_why_each_checkpoint_is_there(tmp_path: Path) -> None:
    """``history`` showed an approval as two unexplained rows, and no fork point or branch;
    ``branches`` printed "1 checkpoints"."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    gated = f"{HERE / 'papercuts_task.py'}:gated"
    paused = run_cli("run", gated, "--thread", "h", "--db", url, db="")
    assert paused.returncode == 3, paused.stdout + paused.stderr
    approved = run_cli("approve", "h", "ok", "--by", "alice", "--db", url, db="")
    assert approved.returncode == 0, approved.stdout + approved.stderr
    wide = {"COLUMNS": "200"}
    shown = run_cli("history", "h", "--db", url, db="", env=wide).stdout
    rows = [ln for ln in shown.splitlines() if " ok " in f" {ln} "]
    assert len(rows) == 2, shown
    assert rows[0].rstrip().endswith("ok: approval answered"), shown
    assert rows[1].rstrip().endswith("ok: approval asked"), shown
    # fork at the checkpoint that completed `first`: a branch of one checkpoint
    (at,) = [ln.split()[0] for ln in shown.splitlines() if " first " in f" {ln} "]
    forked = run_cli("fork", "h", at, "--set", "first=5", "--db", url, db="")
    assert forked.returncode == 0, forked.stdout + forked.stderr
    branches = run_cli("branches", "h", "--db", url, db="").stdout
    assert "1 checkpoint " in branches and "1 checkpoints" not in branches, branches
    after = run_cli("history", "h", "--db", url, db="", env=wide).stdout
    (fork_row,) = [ln for ln in after.splitlines() if ln.startswith(at)]
    assert "fork point" in fork_row, after
    assert "other branch" in after, after


def test_a_report_without_model_calls_has_no_empty_cost_chart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    ran = run_cli("run", TASK, "--thread", "r", "--db", url, db="")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    made = run_cli("report", "r", "-o", str(tmp_path / "r.md"), "--db", url, db="")
    assert made.returncode == 0, made.stdout + made.stderr
    assert sorted(p.name for p in (tmp_path / "r-files").iterdir()) == ["timeline.png"]
    assert "## Cost over time" not in (tmp_path / "r.md").read_text()


def test_a_thread_whose_process_died_is_shown_stopped(tmp_path: Path) -> None:
    """The process running ``second`` is killed: ``ls`` said ``running`` (``status`` knew no
    process advanced it), and the dead step's wall time went on counting in ``status``."""
    url = f"sqlite:///{tmp_path / 'dead.db'}"
    run = subprocess.Popen(
        [sys.executable, "-m", "longtask", "run", TASK, "--thread", "dead", "--db", url],
        env={**os.environ, "LT_PC_GO": str(tmp_path / "never")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while (
            "two/second" not in run_cli("events", "dead", "--kind", "step.started", db=url).stdout
        ):
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.1)
    finally:
        run.kill()
        run.wait(60)
    listed = run_cli("ls", "--db", url, db="", env={"COLUMNS": "120"})
    assert "running (no process)" in listed.stdout, listed.stdout + listed.stderr

    def second_wall() -> float:
        shown = run_cli("status", "dead", "--json", "--db", url, db="")
        steps = {s["name"]: s for s in json.loads(shown.stdout)["steps"]}
        return float(steps["second"]["usage"]["wall_time"])

    before = second_wall()
    time.sleep(1.1)  # long enough for a clock that counts on to show it
    assert second_wall() == before


def test_steps_a_cancel_kept_from_running_get_no_usage_row(tmp_path: Path) -> None:
    """Cancelled while ``hold`` ran, the thread stops before ``first`` and ``second`` run
    their code; they were recorded as started and listed with a usage row all the same."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    go = tmp_path / "go"
    held = f"{HERE / 'papercuts_task.py'}:held"
    run = subprocess.Popen(
        [sys.executable, "-m", "longtask", "run", held, "--thread", "c", "--db", url],
        env={**os.environ, "LT_PC_GO": str(go)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while "one/hold" not in run_cli("events", "c", "--kind", "step.started", db=url).stdout:
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.1)
        cancelled = run_cli("cancel", "c", "--db", url, db="")
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    finally:
        go.touch()
        run.wait(120)
    shown = json.loads(run_cli("status", "c", "--json", "--db", url, db="").stdout)
    assert shown["status"] == "cancelled", shown
    steps = {s["name"]: s for s in shown["steps"]}
    assert steps["hold"]["usage"] is not None
    assert steps["first"]["usage"] is None and steps["second"]["usage"] is None, steps
    started = run_cli("events", "c", "--kind", "step.started", db=url).stdout
    assert "two/" not in started, started
