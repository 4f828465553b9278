"""``longtask export`` and ``longtask import`` from the command line, one process per
command: a release paused at its approval on SQLite is exported, imported into PostgreSQL
and approved there with the printed commands; every step runs once. A refused import exits
1 with one error line and changes nothing."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

import counter
from conftest import run_cli

from longtask import Runner

HERE = Path(__file__).resolve().parent
TASK_REF = f"{HERE / 'approval_task.py'}:task"
CI_PAYLOAD = {"status": "passed", "url": "https://ci/1"}


def test_export_import_approve_across_backends(
    sqlite_url: str, pg_url: str, tmp_path: Path
) -> None:
    calls_db = tmp_path / "calls.db"
    env = {counter.ENV_VAR: str(calls_db)}
    thread = "rel-9"
    run = run_cli(
        "run",
        TASK_REF,
        "--thread",
        thread,
        "--input",
        json.dumps({"version": "3.0.0"}),
        db=sqlite_url,
        env=env,
    )
    assert run.returncode == 3, run.stdout + run.stderr
    signal = run_cli(
        "signal", thread, "ci", "--payload", json.dumps(CI_PAYLOAD), db=sqlite_url, env=env
    )
    assert signal.returncode == 3, signal.stdout + signal.stderr
    assert counter.counts(calls_db) == {"build": 1, "verify": 1}
    history = run_cli("history", thread, "--json", db=sqlite_url)
    effects = run_cli("effects", thread, "--json", db=sqlite_url)

    file = tmp_path / "out dir" / "rel 9.ltz"
    exported = run_cli("export", thread, "-o", str(file), db=sqlite_url)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert file.exists()
    printed = [line for line in exported.stdout.splitlines() if "longtask import" in line]
    assert printed and shlex.quote(str(file)) in printed[0]

    imported = run_cli("import", str(file), "--json", db=pg_url)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    summary = json.loads(imported.stdout)
    assert (summary["thread_id"], summary["status"]) == (thread, "waiting_user")
    assert run_cli("history", thread, "--json", db=pg_url).stdout == history.stdout
    assert run_cli("effects", thread, "--json", db=pg_url).stdout == effects.stdout

    # the same file again: refused, one line, nothing changed
    with Runner(pg_url) as runner:
        before = runner.status(thread)
    again = run_cli("import", str(file), db=pg_url)
    assert again.returncode == 1
    [line] = again.stderr.splitlines()
    assert line.startswith("error: ") and "already exists" in line and "--as NEW_ID" in line
    with Runner(pg_url) as runner:
        after = runner.status(thread)
    assert (after.checkpoint_id, after.status, after.runs) == (
        before.checkpoint_id,
        before.status,
        before.runs,
    )

    approve = run_cli("approve", thread, "approve_release", "--by", "alice", db=pg_url, env=env)
    assert approve.returncode == 0, approve.stdout + approve.stderr
    assert f"thread {thread} completed" in approve.stdout
    assert counter.counts(calls_db) == {"build": 1, "verify": 1, "publish": 1}


def test_import_of_a_file_that_is_not_an_export(pg_url: str, tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.ltz"
    bogus.write_bytes(b"not a zip at all")
    result = run_cli("import", str(bogus), db=pg_url)
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert "corrupt or not a longtask export" in line, line
    assert "Traceback" not in result.stdout + result.stderr


def test_import_refuses_what_is_not_a_regular_file(db_url: str, tmp_path: Path) -> None:
    """A FIFO blocked ``longtask import`` forever, a device node was read until memory ran
    out (issue 39): each is refused at once with one line saying what to give instead."""
    fifo = tmp_path / "pipe.ltz"
    os.mkfifo(fifo)
    link = tmp_path / "zero.ltz"
    link.symlink_to("/dev/zero")
    for source, fragment in [
        (fifo, "is not a regular file (a pipe, device or socket)"),
        (Path("/dev/zero"), "is not a regular file"),
        (link, "is not a regular file"),
        (tmp_path, "is a directory; give the file `longtask export` wrote"),
    ]:
        # A refusal is immediate: the timeout only ends a regression that blocks.
        result = run_cli("import", str(source), db=db_url, timeout=60)
        assert result.returncode == 1, result.stdout + result.stderr
        [line] = result.stderr.splitlines()
        assert line.startswith("error: ") and fragment in line, line
    with Runner(db_url) as runner:
        assert runner.threads() == []


def test_export_refuses_a_target_it_would_destroy(db_url: str, tmp_path: Path) -> None:
    from longtask.runtime import load_task

    with Runner(db_url) as runner:
        runner.start(load_task(TASK_REF), {"version": "1.0.0"}, thread_id="rel-x")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    kept = tmp_path / "kept.ltz"
    kept.write_bytes(b"an earlier export")
    for target, fragment in [
        (tmp_path, "is a directory; name the file to write"),
        (fifo, "exists and is not a regular file"),
        (kept, "exists; pass --force"),
    ]:
        result = run_cli("export", "rel-x", "-o", str(target), db=db_url)
        assert result.returncode == 1, result.stdout + result.stderr
        [line] = result.stderr.splitlines()
        assert line.startswith("error: ") and fragment in line, line
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert kept.read_bytes() == b"an earlier export"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".export-")]
    forced = run_cli("export", "rel-x", "-o", str(kept), "--force", db=db_url)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert kept.read_bytes()[:2] == b"PK"  # a zip: the export replaced the old file
