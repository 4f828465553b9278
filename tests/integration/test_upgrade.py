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
        import psycopg

        dump = (FIXTURES / "release-0.1.sql").read_text()
        # pg_dump's psql meta-commands (\restrict) are not SQL
        sql = "\n".join(line for line in dump.splitlines() if not line.startswith("\\"))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[call-overload]
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
