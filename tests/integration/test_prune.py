"""Retention (``Runner.prune``, ``longtask prune``): old finished threads go with every row
they own, while live, paused and recent threads, and blobs another thread shares, stay.

Threads are made old by moving their ``updated_at`` (and every blob's ``created_at``) back
100 days; the running thread is a real ``longtask run`` process blocked in a step.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from longtask import InvalidInput, Runner, StepFailed, ThreadBusy
from longtask.runtime._taskref import load_task
from longtask.store import _retention as ret
from longtask.store._writer import LIVE_DELAY

HERE = Path(__file__).resolve().parent
REF = f"{HERE / 'prune_task.py'}:task"
PAUSED_REF = f"{HERE / 'prune_task.py'}:paused"
DAY = 86400.0


@pytest.fixture
def tasks() -> tuple[Any, Any]:
    return load_task(REF), load_task(PAUSED_REF)


def _age(r: Runner, thread_ids: list[str], days: float = 100) -> None:
    """Move these threads' last update, and every blob's storing time, ``days`` back."""
    store = r.db.store
    for tid in thread_ids:
        store._run(
            "UPDATE longtask_threads SET updated_at = updated_at - ? WHERE thread_id = ?",
            (days * DAY, tid),
        )
    store._run("UPDATE longtask_blobs SET created_at = created_at - ?", (days * DAY,))


def _counts(r: Runner, thread_ids: list[str]) -> dict[str, dict[str, int]]:
    return {tid: ret.count_rows(r.db.store, tid) for tid in thread_ids}


def _blobs(r: Runner) -> set[str]:
    return {str(row[0]) for row in r.db.store._run("SELECT digest FROM longtask_blobs")}


def _artifact_files(r: Runner) -> set[str]:
    d = r.db.store.artifact_dir
    if d is None or not d.exists():
        return set()
    return {p.name for p in d.glob("*/*") if not p.name.startswith(".")}


@pytest.fixture
def live(db_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A thread running in another process, blocked inside its ``gate`` step."""
    marker, gate = tmp_path / "blocking", tmp_path / "go"
    env = {
        **os.environ,
        "LONGTASK_DB": db_url,
        "LT_PRUNE_MARKER": str(marker),
        "LT_PRUNE_GATE": str(gate),
    }
    args = ["run", REF, "--thread", "live", "--input", json.dumps({"block": True})]
    proc = subprocess.Popen(
        [sys.executable, "-m", "longtask", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), proc.communicate(timeout=30)
        # Events about work in progress (its steps' starts, an artifact) are stored while
        # the steps run, each within LIVE_DELAY: wait until they all are, so the counts the
        # test compares do not change under it.
        with Runner(db_url) as r:
            seen = -1
            while (n := len(r.db.store.events("live"))) != seen or not r.db.store.events(
                "live", kinds=["step.started"]
            ):
                assert time.monotonic() < deadline, "the live thread's events never settled"
                seen = n
                time.sleep(4 * LIVE_DELAY)
        yield {"proc": proc, "gate": gate}
    finally:
        gate.write_text("go")
        if proc.poll() is None:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _setup(r: Runner, tasks: tuple[Any, Any]) -> None:
    task, paused = tasks
    r.start(task, {"shared": True}, thread_id="old-done")
    r.start(task, {}, thread_id="old-done-own")
    r.start(task, {"shared": True}, thread_id="new-done")
    with pytest.raises(StepFailed):
        r.start(task, {"fail": True}, thread_id="old-failed")
    r.start(paused, {}, thread_id="old-paused")
    r.start(paused, {"shared": True}, thread_id="old-cancelled")
    r.cancel("old-cancelled", reason="not needed")


def test_prune_deletes_old_finished_threads_and_nothing_of_live_ones(
    db_url: str, tasks: tuple[Any, Any], live: dict[str, Any]
) -> None:
    r = Runner(db_url)
    try:
        _setup(r, tasks)
        statuses = {t.thread_id: t.status for t in r.db.store.list_threads()}
        assert statuses == {
            "old-done": "completed",
            "old-done-own": "completed",
            "new-done": "completed",
            "old-failed": "failed",
            "old-paused": "waiting_user",
            "old-cancelled": "cancelled",
            "live": "running",
        }
        old = ["old-done", "old-done-own", "old-failed", "old-paused", "old-cancelled", "live"]
        _age(r, old)
        every = [*old, "new-done"]
        kept = ["new-done", "old-paused", "live"]
        pruned = ["old-done", "old-done-own", "old-failed", "old-cancelled"]
        before = _counts(r, every)
        refs = {tid: ret.blob_refs(r.db.store, tid) for tid in every}
        files_before = _artifact_files(r)
        for tid in pruned:  # each owns rows everywhere the test looks
            for table in ("longtask_events", "longtask_cp_checkpoints", "longtask_threads"):
                assert before[tid][table] > 0, (tid, table)
        assert before["old-done"]["longtask_effects"] == 1
        assert before["old-done"]["longtask_artifacts"] == 2
        assert before["old-done"]["longtask_budgets"] == 1
        shared = refs["old-done"] & refs["new-done"]
        own = refs["old-done-own"] - set().union(*(refs[t] for t in kept))
        assert shared and own

        dry = r.prune(completed_before="30d", failed_before="90d", dry_run=True)
        assert _counts(r, every) == before
        assert sorted(t for t, _ in dry.threads) == sorted(pruned)
        assert dry.blobs >= 1

        report = r.prune(completed_before="30d", failed_before="90d", batch=2)

        assert sorted(t for t, _ in report.threads) == sorted(pruned)
        assert report.by_status == {"completed": 2, "failed": 1, "cancelled": 1}
        after = _counts(r, every)
        for tid in pruned:
            assert set(after[tid].values()) == {0}, (tid, after[tid])
        for tid in ("new-done", "old-paused"):
            assert after[tid] == before[tid]
        # the live thread is blocked mid-step: nothing of it went, nothing changed
        assert after["live"] == before["live"]
        assert report.rows["longtask_threads"] == 4
        assert report.rows["longtask_events"] == sum(before[t]["longtask_events"] for t in pruned)
        blobs = _blobs(r)
        for tid in kept:
            assert refs[tid] <= blobs, tid  # shared ones included
        assert not (own & blobs)
        assert report.blobs >= len(own)
        if r.db.store.artifact_dir is not None:
            files = _artifact_files(r)
            assert files < files_before  # the pruned threads' own reports are gone
            kept_files = {a.digest for t in kept for a in r.db.store.artifacts(t)}
            assert kept_files <= files  # the common report stays with new-done
            assert report.artifact_files == len(files_before - files)
        assert r.result("new-done", "big")["text"].startswith("shared")
        assert r.status("old-paused").status == "waiting_user"

        # pruning again finds nothing
        again = r.prune(completed_before="30d", failed_before="90d")
        assert again.threads == [] and again.blobs == 0

        # the live thread goes on and completes normally
        live["gate"].write_text("go")
        out, err = live["proc"].communicate(timeout=120)
        assert live["proc"].returncode == 0, (out, err)
        assert r.status("live").status == "completed"
        assert r.result("live", "gate") == "x" * 2000
        assert r.result("live", "big")["text"].startswith("live ")
    finally:
        r.close()


def test_keep_last_checkpoint_keeps_results_and_drops_history(
    db_url: str, tasks: tuple[Any, Any]
) -> None:
    r = Runner(db_url)
    try:
        task, _ = tasks
        r.start(task, {}, thread_id="t")
        r.start(task, {"shared": True}, thread_id="other")
        results = {s: r.result("t", s) for s in ("big", "charge", "report", "gate")}
        _age(r, ["t"])
        before = ret.count_rows(r.db.store, "t")
        assert before["longtask_cp_checkpoints"] > 1
        refs = ret.blob_refs(r.db.store, "t")

        report = r.prune(completed_before="30d", keep_last_checkpoint=True)

        assert report.threads == [("t", "completed")]
        after = ret.count_rows(r.db.store, "t")
        assert after["longtask_cp_checkpoints"] == 1
        assert after["longtask_events"] == 0
        for table in ("longtask_threads", "longtask_artifacts", "longtask_effects"):
            assert after[table] == before[table], table
        assert r.status("t").status == "completed"
        assert {s: r.result("t", s) for s in results} == results
        assert len(r.history("t")) == 1
        assert refs <= _blobs(r)  # the kept checkpoint still refers to them
        assert ret.count_rows(r.db.store, "other")["longtask_events"] > 0

        again = r.prune(completed_before="30d", keep_last_checkpoint=True)
        assert again.threads == []
    finally:
        r.close()


def test_bad_ages_are_refused_and_change_nothing(db_url: str, tasks: tuple[Any, Any]) -> None:
    r = Runner(db_url)
    try:
        r.start(tasks[0], {}, thread_id="t")
        _age(r, ["t"])
        before = ret.count_rows(r.db.store, "t")
        with pytest.raises(InvalidInput, match="30x"):
            r.prune(completed_before="30x")
        # Issue 28, item 12: only the README's forms (a whole number of ASCII digits, the
        # unit right after it), and not past what a date can hold.
        for bad in ("1.5d", "30 d", " 30d", "\u0663\u0660d", "1e3d", "-1d", "30D"):
            with pytest.raises(InvalidInput, match="is not a duration"):
                r.prune(completed_before=bad)
        with pytest.raises(InvalidInput, match="too long"):
            r.prune(completed_before="999999999w")
        with pytest.raises(InvalidInput, match="is not a duration"):
            r.prune(completed_before="1" * 31 + "d")
        with pytest.raises(InvalidInput, match="nothing to prune"):
            r.prune()
        assert ret.count_rows(r.db.store, "t") == before
    finally:
        r.close()


def test_prune_command(db_url: str, tasks: tuple[Any, Any]) -> None:
    r = Runner(db_url)
    try:
        r.start(tasks[0], {}, thread_id="old")
        r.start(tasks[0], {}, thread_id="new")
        _age(r, ["old"])
        before = _counts(r, ["old", "new"])
    finally:
        r.close()

    bad = run_cli("prune", "--completed-before", "thirty days", db=db_url)
    assert bad.returncode == 2, bad.stderr
    assert "thirty days" in bad.stderr and "30d" in bad.stderr

    dry = run_cli("prune", "--completed-before", "30d", "--dry-run", "--json", db=db_url)
    assert dry.returncode == 0, dry.stderr
    data = json.loads(dry.stdout)
    assert data["dry_run"] is True
    assert [t["thread_id"] for t in data["threads"]] == ["old"]

    text = run_cli("prune", "--completed-before", "30d", "--dry-run", db=db_url)
    assert text.returncode == 0, text.stderr
    assert "would prune 1 thread" in text.stdout

    done = run_cli("prune", "--completed-before", "30d", "--json", db=db_url)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["by_status"] == {"completed": 1}
    assert data["rows"]["longtask_events"] == before["old"]["longtask_events"]

    r = Runner(db_url)
    try:
        after = _counts(r, ["old", "new"])
        assert set(after["old"].values()) == {0}
        assert after["new"] == before["new"]
    finally:
        r.close()


def test_a_worker_prunes_on_a_schedule(pg_url: str, tasks: tuple[Any, Any], tmp_path: Path) -> None:
    r = Runner(pg_url)
    try:
        r.start(tasks[0], {}, thread_id="old")
        r.start(tasks[0], {}, thread_id="new")
        _age(r, ["old"])
        before = _counts(r, ["new"])
        log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 (closed below)
        args = ["worker", "--prune-completed-before", "30d", "--prune-every", "1s"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "longtask", *args],
            env={**os.environ, "LONGTASK_DB": pg_url},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            # the worker logs what it pruned once the whole prune (blobs too) is done
            while "pruned 1 thread(s)" not in (tmp_path / "worker.log").read_text():
                assert proc.poll() is None and time.monotonic() < deadline, (
                    tmp_path / "worker.log"
                ).read_text()
                time.sleep(0.1)
            assert proc.poll() is None, (tmp_path / "worker.log").read_text()
        finally:
            proc.terminate()
            proc.wait(30)
            log.close()
        assert set(_counts(r, ["old"])["old"].values()) == {0}
        assert _counts(r, ["new"]) == before
    finally:
        r.close()


def test_worker_prune_options_are_checked(sqlite_url: str) -> None:
    bad = run_cli("worker", "--prune-completed-before", "soon", db=sqlite_url)
    assert bad.returncode == 2
    assert "--prune-completed-before" in bad.stderr and "30d" in bad.stderr


def test_a_blob_stored_again_during_a_prune_is_kept(db_url: str, tasks: tuple[Any, Any]) -> None:
    """A writer that stores an existing digest again refreshes its storing time, so a sweep
    that read past the writer's new reference still keeps the blob."""
    r = Runner(db_url)
    try:
        r.start(tasks[0], {"shared": True}, thread_id="first")
        shared = ret.blob_refs(r.db.store, "first")
        assert shared
        _age(r, ["first"])
        stored_before = time.time() - ret.BLOB_GRACE
        # the shared results stored again by a new thread (its step's blob insert)
        r.start(tasks[0], {"shared": True}, thread_id="second")
        again = shared & ret.blob_refs(r.db.store, "second")
        assert again
        # as if the sweep had missed the second thread's rows: the blobs still stay
        assert ret.delete_blobs(r.db.store, again, stored_before) == (0, 0)
        assert again <= _blobs(r)
        # and once they are old again, nothing else protects them (the guard above mattered)
        _age(r, [])
        count, _ = ret.delete_blobs(r.db.store, again, time.time() - ret.BLOB_GRACE)
        assert count == len(again - {a.digest for a in r.db.store.artifacts("second")})
    finally:
        r.close()


def test_one_scheduled_prune_at_a_time(pg_url: str, tasks: tuple[Any, Any]) -> None:
    from datetime import timedelta

    from longtask.ops._prune import PruneSchedule, prune_turn

    with Runner(pg_url) as r:
        r.start(tasks[0], {}, thread_id="old")
        _age(r, ["old"])
        schedule = PruneSchedule(completed_before=timedelta(days=30))
        with prune_turn(r.db) as mine:  # as another worker pruning right now
            assert mine
            assert schedule.run(r) is None
            assert r.db.store.get_thread("old") is not None
        report = schedule.run(r)
        assert report is not None and report.threads == [("old", "completed")]


def test_a_long_backlog_frees_blobs_as_it_goes(
    db_url: str, tasks: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import longtask.ops._prune as prune_module

    monkeypatch.setattr(prune_module, "SWEEP_AT", 1)  # free after every page
    with Runner(db_url) as r:
        for tid in ("old-1", "old-2", "old-3"):
            r.start(tasks[0], {}, thread_id=tid)
        r.start(tasks[0], {"shared": True}, thread_id="kept")
        _age(r, ["old-1", "old-2", "old-3"])
        refs = {tid: ret.blob_refs(r.db.store, tid) for tid in ("old-1", "old-2", "old-3", "kept")}
        own = set().union(*(refs[t] for t in ("old-1", "old-2", "old-3"))) - refs["kept"]
        assert own
        report = r.prune(completed_before="30d", batch=1)
        assert len(report.threads) == 3
        blobs = _blobs(r)
        assert refs["kept"] <= blobs
        assert not (own & blobs)
        assert r.result("kept", "gate") == "x" * 2000


# -- longtask delete THREAD (issue 29, item 13) -------------------------------------------------


def test_delete_one_thread_by_id(db_url: str, tasks: tuple[Any, Any]) -> None:
    """``delete`` without --force changes nothing and prints the command that deletes; that
    command, pasted, deletes the thread's rows in every table prune empties, and nothing of
    the other threads (a blob they share stays)."""
    task, paused = tasks
    r = Runner(db_url)
    try:
        r.start(task, {"shared": True}, thread_id="done")
        r.start(task, {"shared": True}, thread_id="other")
        with pytest.raises(StepFailed):
            r.start(task, {"fail": True}, thread_id="failed")
        r.start(paused, {}, thread_id="waiting")
        every = ["done", "other", "failed", "waiting"]
        before = _counts(r, every)
        shared = ret.blob_refs(r.db.store, "done") & ret.blob_refs(r.db.store, "other")
        assert shared
        for table in ("longtask_events", "longtask_effects", "longtask_artifacts"):
            assert before["done"][table] > 0, table
    finally:
        r.close()

    dry = run_cli("delete", "done", "--db", db_url, db="sqlite:///elsewhere.db")
    assert dry.returncode == 0, dry.stderr
    assert "would delete 1 thread: completed 1" in dry.stdout, dry.stdout
    printed = dry.stdout.strip().splitlines()[-1]
    assert printed.startswith("nothing deleted; delete it with: longtask delete done --db ")
    assert printed.endswith(" --force"), printed
    r = Runner(db_url)
    try:
        assert _counts(r, every) == before
    finally:
        r.close()

    pasted = shlex.split(printed.split(": ", 1)[1])[1:]
    done = run_cli(*pasted, db="sqlite:///elsewhere.db")
    assert done.returncode == 0, done.stderr
    assert "deleted 1 thread: completed 1" in done.stdout, done.stdout
    assert f"longtask_events: {before['done']['longtask_events']} rows" in done.stdout

    failed = run_cli("delete", "failed", "--force", "--json", db=db_url)
    assert failed.returncode == 0, failed.stderr
    assert json.loads(failed.stdout)["threads"] == [{"thread_id": "failed", "status": "failed"}]

    r = Runner(db_url)
    try:
        after = _counts(r, every)
        assert set(after["done"].values()) == {0}, after["done"]
        assert set(after["failed"].values()) == {0}, after["failed"]
        assert after["other"] == before["other"]
        assert after["waiting"] == before["waiting"]
        assert shared <= _blobs(r)
        assert r.result("other", "big")["text"].startswith("shared")
    finally:
        r.close()

    gone = run_cli("delete", "done", "--force", db=db_url)
    assert gone.returncode != 0
    assert "no thread 'done'" in gone.stderr, gone.stderr


def test_delete_refuses_a_thread_that_has_not_ended(
    db_url: str, tasks: tuple[Any, Any], live: dict[str, Any]
) -> None:
    """A paused thread and one running in another process stay, every row of them; the
    message says to cancel first, with a command that works pasted."""
    r = Runner(db_url)
    try:
        r.start(tasks[1], {}, thread_id="waiting")
        before = _counts(r, ["waiting", "live"])
        with pytest.raises(InvalidInput, match="waiting_user, not ended"):
            r.delete("waiting")
    finally:
        r.close()

    for tid, status in (("waiting", "waiting_user"), ("live", "running")):
        proc = run_cli("delete", tid, "--force", "--db", db_url, db="sqlite:///elsewhere.db")
        assert proc.returncode != 0
        assert f"is {status}, not ended" in proc.stderr, proc.stderr
        assert f"`longtask cancel {tid} --db " in proc.stderr, proc.stderr

    r = Runner(db_url)
    try:
        assert _counts(r, ["waiting", "live"]) == before
    finally:
        r.close()
    live["gate"].write_text("go")
    out, err = live["proc"].communicate(timeout=120)
    assert live["proc"].returncode == 0, (out, err)


def test_delete_refuses_an_ended_thread_a_process_holds(
    db_url: str, tasks: tuple[Any, Any]
) -> None:
    r = Runner(db_url)
    try:
        r.start(tasks[0], {}, thread_id="done")
        before = ret.count_rows(r.db.store, "done")
        with r.db.lock("done"), Runner(db_url) as other, pytest.raises(ThreadBusy):
            other.delete("done")
        assert ret.count_rows(r.db.store, "done") == before
    finally:
        r.close()
