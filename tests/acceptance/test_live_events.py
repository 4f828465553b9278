"""A running step is seen from other processes while it runs (both backends).

Process A runs ``live_task.py``, whose ``crunch`` step takes 10 s and reports progress each
second. Beside it, in their own processes: ``longtask events T --follow --json`` and
``longtask watch T --json`` (each line is stamped with the time this test read it), and
``longtask status T --json`` polled mid-step. Before events were stored while a step ran,
everything of ``crunch`` arrived at once when it returned.

Then a crash: A is killed (SIGKILL) in the middle of ``crunch`` and the thread resumed. The
log keeps what the dead attempt reported, says it was abandoned and that the thread was
recovered, and the next attempt is numbered 2.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from conftest import run_cli

from longtask import Runner

HERE = Path(__file__).resolve().parent
TASK = f"{HERE / 'live_task.py'}:task"


def _cli(*args: str, db: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "longtask", *args],
        env={**os.environ, "LONGTASK_DB": db, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class Reader:
    """Reads a follower's JSON lines as they come, stamping each with its arrival time."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self.lines.append((time.time(), json.loads(line)))

    def arrived(self, kind: str, step: str | None = None) -> list[tuple[float, dict[str, Any]]]:
        return [
            (at, e)
            for at, e in self.lines
            if e["kind"] == kind and (step is None or e["step"] == step)
        ]

    def finish(self, timeout: float = 60) -> None:
        self.proc.wait(timeout)
        self.thread.join(timeout)


def _wait_thread(db_url: str, thread_id: str) -> None:
    deadline = time.monotonic() + 60
    with Runner(db_url) as runner:
        while runner.db.store.get_thread(thread_id) is None:
            assert time.monotonic() < deadline, "the thread never appeared"
            time.sleep(0.02)


def test_a_running_step_is_seen_while_it_runs(db_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    run = _cli("run", TASK, "--thread", "t-live", db=db_url, env={"LT_LIVE_GO": str(go)})
    _wait_thread(db_url, "t-live")
    followers = [
        Reader(_cli("events", "t-live", "--follow", "--json", db=db_url)),
        Reader(_cli("watch", "t-live", "--json", db=db_url)),
    ]
    # the step starts once both followers are up (each has printed the thread's first event)
    deadline = time.monotonic() + 60
    while not all(f.lines for f in followers):
        assert time.monotonic() < deadline, "a follower printed nothing"
        time.sleep(0.02)
    go.write_text("go")
    # `status` mid-step shows the running step's last progress report
    mid_step: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while run.poll() is None and time.monotonic() < deadline:
        st = run_cli("status", "t-live", "--json", db=db_url)
        if st.returncode in (0, 3, 4, 5) and st.stdout.strip().startswith("{"):
            steps = {s["name"]: s for s in json.loads(st.stdout)["steps"]}
            if steps["crunch"]["state"] == "running" and steps["crunch"].get("progress"):
                mid_step.append(steps["crunch"]["progress"])
        time.sleep(0.5)
    assert run.wait(60) == 0, run.stderr.read() if run.stderr else ""
    for f in followers:
        f.finish()
        assert f.proc.returncode == 0, f.proc.stderr.read() if f.proc.stderr else ""

    assert mid_step, "status never showed crunch's progress while it ran"
    assert any(0 < p["done"] < 10 and p["total"] == 10 for p in mid_step), mid_step
    assert all(p["message"] == "crunching" for p in mid_step), mid_step
    for f in followers:
        (started_at, started), *_ = f.arrived("step.started", "crunch")
        ((completed_at, completed),) = f.arrived("step.completed", "crunch")
        emitted = _epoch(started["ts"])
        assert started_at - emitted < 1.5, f"step.started arrived {started_at - emitted:.2f} s late"
        # seen before the step returned, each progress report within a moment of being made
        early = [
            (at, e)
            for at, e in f.arrived("step.progress", "crunch")
            if at < completed_at - 0.5 and at - _epoch(e["ts"]) < 1.5
        ]
        assert len(early) >= 8, [(round(at - _epoch(e["ts"]), 2), e["data"]) for at, e in early]
        assert completed["attempt"] == 1


def _epoch(ts: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(ts).timestamp()


def test_a_crash_mid_step_leaves_an_honest_record(db_url: str) -> None:
    run = _cli("run", TASK, "--thread", "t-dead", db=db_url)
    _wait_thread(db_url, "t-dead")
    with Runner(db_url) as runner:
        deadline = time.monotonic() + 60
        while len([e for e in runner.events("t-dead") if e.kind == "step.progress"]) < 3:
            assert run.poll() is None, run.stderr.read() if run.stderr else ""
            assert time.monotonic() < deadline, "crunch never reported progress"
            time.sleep(0.05)
    os.kill(run.pid, signal.SIGKILL)
    run.wait(30)
    with Runner(db_url) as runner:
        before = [e.to_json() for e in runner.events("t-dead")]
    resumed = run_cli("resume", "t-dead", db=db_url, env={"LT_LIVE_SECONDS": "2"})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    with Runner(db_url) as runner:
        after = [e.to_json() for e in runner.events("t-dead")]
        assert runner.status("t-dead").status == "completed"

    # what the dead attempt reported is kept, unchanged, ahead of what came after
    assert after[: len(before)] == before
    dead = [e for e in before if e["step"] == "crunch"]
    assert [e["kind"] for e in dead][:1] == ["step.started"] and dead[0]["attempt"] == 1
    assert sum(e["kind"] == "step.progress" for e in dead) >= 3
    later = after[len(before) :]
    kinds = [(e["kind"], e["step"], e["attempt"]) for e in later]
    assert kinds[:2] == [("longtask.recovered", None, None), ("step.abandoned", "crunch", 1)]
    recovered = later[0]["data"]
    assert recovered["abandoned"] == ["crunch"]
    assert later[1]["data"]["next_attempt"] == 2
    assert ("step.started", "crunch", 2) in kinds
    assert ("step.completed", "crunch", 2) in kinds
    # prep ran once: finished steps never run again
    assert (
        sum(
            k == ("step.started", "prep", 1)
            for k in [(e["kind"], e["step"], e["attempt"]) for e in after]
        )
        == 1
    )
    # the timeline shows the dead attempt as a bar of its own
    from longtask.ops._plots import spans

    with Runner(db_url) as runner:
        rows = spans(runner.db.store.events("t-dead"))
    assert [(s, outcome) for s, _, _, outcome in rows if s == "crunch"] == [
        ("crunch", "abandoned"),
        ("crunch", "completed"),
    ]
