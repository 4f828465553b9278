"""Databases written by longtask 0.1 (LangGraph's own savers; tests/fixtures/release-0.1.*)
are upgraded, and their paused and failed threads resume without re-running finished
steps."""

from __future__ import annotations

import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import _admin, _pg_url, run_cli

from longtask import Runner
from longtask.checkpointers import Database

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture
def upgrade_task(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[object]:
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv("LT_UPGRADE_CALLS", str(tmp_path / "calls.txt"))
    monkeypatch.setenv("LT_UPGRADE_FLAKY", "1")
    import upgrade_task

    yield upgrade_task
    sys.modules.pop("upgrade_task", None)


def _calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls.txt"
    return path.read_text().split() if path.exists() else []


def _resume_both(url: str, task: object, tmp_path: Path) -> None:
    with Runner(url) as runner:
        assert runner.status("paused").status == "waiting_user"
        assert runner.status("failed").status == "failed"
        before = runner.results("paused")
        assert before["squares"] == [1, 4, 9] and before["left"] == {"left": 1}
        runner.approve("paused", "approve", by="upgrade-test", task=task)  # type: ignore[arg-type]
        runner.resume("failed", task=task)  # type: ignore[arg-type]
        for thread in ("paused", "failed"):
            assert runner.status(thread).status == "completed"
            assert runner.result(thread, "finish") == {
                "sum": 3,
                "squares": [1, 4, 9],
                "flaky": "fixed",
            }
            assert len(runner.branches(thread)) == 1
        # nothing that had finished before the upgrade ran again
        assert sorted(_calls(tmp_path)) == ["finish", "finish", "flaky", "flaky"]
        kinds = [e.kind for e in runner.events("paused")]
        assert kinds[0] == "longtask.started" and kinds[-1] == "longtask.completed"


def _restore(url: str, dump_name: str) -> None:
    """Load a pg_dump of a fixture database into the (empty) database at ``url``."""
    import psycopg

    dump = (FIXTURES / dump_name).read_text()
    # pg_dump's psql meta-commands (\restrict) are not SQL
    sql = "\n".join(line for line in dump.splitlines() if not line.startswith("\\"))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[call-overload]


def test_sqlite_database_of_release_0_1(upgrade_task: object, tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    shutil.copy(FIXTURES / "release-0.1.db", path)
    url = f"sqlite:///{path}"
    # Opening an SQLite database upgrades it (the embedded default needs no command).
    _resume_both(url, upgrade_task.task, tmp_path)  # type: ignore[attr-defined]
    with Database.open(url) as db:
        assert db.upgrade() == []  # done once


@pytest.mark.postgres
def test_postgres_database_of_release_0_1(
    pg_template: str, upgrade_task: object, tmp_path: Path
) -> None:
    name = f"lt_upgrade_{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE DATABASE "{name}"')
    url = _pg_url(name)
    try:
        _restore(url, "release-0.1.sql")
        with pytest.raises(Exception, match="longtask db upgrade"):
            Database.open(url)  # an old schema is refused until upgraded
        done = run_cli("db", "upgrade", db=url)
        assert done.returncode == 0, done.stderr
        assert "2 thread(s) copied" in done.stdout
        _resume_both(url, upgrade_task.task, tmp_path)  # type: ignore[attr-defined]
        again = run_cli("db", "upgrade", db=url)
        assert "copied" not in again.stdout
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- schema 16: checkpoints ordered by id, numbered by migration 17 ---------------------------


def _cp_rows(url: str) -> dict[str, list[tuple[str, str | None, int]]]:
    """(id, parent, seq) of every root checkpoint, by thread, in sequence order."""
    with Database.open(url) as db:
        rows = db.store._run(
            "SELECT thread_id, checkpoint_id, parent_id, seq FROM longtask_cp_checkpoints "
            "WHERE checkpoint_ns = '' ORDER BY thread_id, seq"
        )
    out: dict[str, list[tuple[str, str | None, int]]] = {}
    for r in rows:
        out.setdefault(str(r[0]), []).append((str(r[1]), r[2], int(r[3])))
    return out


def _check_schema_16(url: str, task: object, tmp_path: Path) -> None:
    """After migration 17: each checkpoint is numbered after its parent; the threads one
    clock wrote keep their order (the fork stays the newest head); the thread a clock 30 s
    behind had continued is led by the checkpoint written last, which the id order had put
    below the old head, and nothing that had finished runs again."""
    rows = _cp_rows(url)
    assert set(rows) == {"paused", "failed", "forked", "skewed"}
    for thread, line in rows.items():
        seq_of = {cid: seq for cid, _, seq in line}
        assert sorted(seq_of.values()) == list(range(1, len(line) + 1)), thread
        assert all(parent is None or seq_of[parent] < seq for _, parent, seq in line), thread
        if thread != "skewed":
            assert [cid for cid, _, _ in line] == sorted(seq_of), thread
    skewed = rows["skewed"]
    head, parent, _ = skewed[-1]
    assert parent is not None and head < max(cid for cid, _, _ in skewed)
    with Runner(url) as runner:
        assert runner.status("skewed").status == "completed"  # its true head holds finish
        assert runner.history("skewed")[0].checkpoint_id == head
        forked = runner.branches("forked")
        assert len(forked) == 2
        assert [b.head for b in forked if b.current] == [rows["forked"][-1][0]]
        runner.approve("paused", "approve", by="upgrade-test", task=task)  # type: ignore[arg-type]
        runner.resume("failed", task=task)  # type: ignore[arg-type]
        runner.resume("skewed", task=task)  # type: ignore[arg-type]
        for thread in ("paused", "failed", "skewed"):
            assert runner.status(thread).status == "completed"
            assert runner.result(thread, "finish") == {
                "sum": 3,
                "squares": [1, 4, 9],
                "flaky": "fixed",
            }
    # paused and failed ran what was left of them; skewed had nothing left
    assert sorted(_calls(tmp_path)) == ["finish", "finish", "flaky", "flaky"]
    # a checkpoint stored after the upgrade is numbered after the head
    after = _cp_rows(url)
    for thread in ("paused", "failed"):
        assert after[thread][: len(rows[thread])] == rows[thread]
        assert after[thread][-1][2] == len(after[thread])


def test_sqlite_database_of_schema_16(upgrade_task: object, tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    shutil.copy(FIXTURES / "schema-16.db", path)
    _check_schema_16(f"sqlite:///{path}", upgrade_task.task, tmp_path)  # type: ignore[attr-defined]


@pytest.mark.postgres
def test_postgres_database_of_schema_16(
    pg_template: str, upgrade_task: object, tmp_path: Path
) -> None:
    name = f"lt_upgrade_{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE DATABASE "{name}"')
    url = _pg_url(name)
    try:
        _restore(url, "schema-16.sql")
        with pytest.raises(Exception, match="longtask db upgrade"):
            Database.open(url)
        done = run_cli("db", "upgrade", db=url)
        assert done.returncode == 0, done.stderr
        _check_schema_16(url, upgrade_task.task, tmp_path)  # type: ignore[attr-defined]
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
