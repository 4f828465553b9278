"""Following a thread from another process sees every event once, in order, across a crash
and a restart of the process advancing it (both backends).

Process A runs ``follow_task.py`` and dies in step s4; process B resumes it to completion.
Two followers run all along in their own processes, ``longtask events THREAD --follow
--json`` and ``longtask watch THREAD --json``; each prints exactly the thread's event log,
id by id, and exits by itself when the thread completes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import run_cli

from longtask import Runner

HERE = Path(__file__).resolve().parent


def _cli(*args: str, db: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "longtask", *args],
        env={**os.environ, "LONGTASK_DB": db, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_followers_see_every_event_once_across_a_restart(db_url: str, tmp_path: Path) -> None:
    env = {"LT_FOLLOW_MARKER": str(tmp_path / "crashed")}
    first = _cli(
        "run", f"{HERE / 'follow_task.py'}:task", "--thread", "t-follow", db=db_url, env=env
    )
    deadline = time.monotonic() + 60
    with Runner(db_url) as runner:
        while runner.db.store.get_thread("t-follow") is None:
            assert time.monotonic() < deadline, "the thread never appeared"
            time.sleep(0.02)
    followers = [
        _cli("events", "t-follow", "--follow", "--json", db=db_url, env=env),
        _cli("watch", "t-follow", "--json", db=db_url, env=env),
    ]
    assert first.wait(60) == 1, first.stderr.read() if first.stderr else ""
    time.sleep(0.5)  # the followers keep waiting on a thread nobody advances
    assert all(f.poll() is None for f in followers)
    resumed = run_cli("resume", "t-follow", db=db_url, env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    outputs = []
    for f in followers:
        stdout, stderr = f.communicate(timeout=60)
        outputs.append((f.returncode, stdout, stderr))
    with Runner(db_url) as runner:
        stored = [e.to_json() for e in runner.events("t-follow")]
    assert stored[-1]["kind"] == "longtask.completed"
    kinds = [e["kind"] for e in stored]
    # s4 started twice (before and after the crash), unless the crashed process died with
    # that event still queued
    assert kinds.count("step.started") >= 6
    assert "step.progress" in kinds and "artifact.created" in kinds
    for code, stdout, stderr in outputs:
        assert code == 0, stderr
        seen = [json.loads(line) for line in stdout.splitlines()]
        assert [e["id"] for e in seen] == [e["id"] for e in stored]
        assert seen == stored
