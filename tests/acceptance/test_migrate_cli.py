"""``longtask check`` and ``longtask migrate`` against real paused threads of an older
definition (issue 30), in new processes, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli

from longtask import Runner
from longtask.runtime import load_versions

TASKS = Path(__file__).parents[1] / "integration" / "migrate_task.py"
ONLY_V2 = f"{TASKS}:only_v2"
BOTH = f"{TASKS}:both"


def _paused_threads(db_url: str) -> None:
    v1 = load_versions(f"{TASKS}:only_v1").newest
    with Runner(db_url) as runner:
        for tid in ("p1", "p2"):
            runner.start(v1, {}, thread_id=tid)
            assert runner.status(tid).status == "waiting_user"


def _rows(db_url: str, tid: str) -> object:
    from longtask.store._owned import carried_tables, read_rows

    with Runner(db_url) as runner:
        return {t.name: read_rows(runner.db.store, t, tid) for t in carried_tables()}


def test_check_then_migrate(db_url: str) -> None:
    _paused_threads(db_url)
    before = _rows(db_url, "p1")

    # code with only v2 strands both threads: exit 1, a plan per thread, nothing written
    done = run_cli("check", ONLY_V2, "--json", db=db_url)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert not report["ok"] and report["versions"] == ["2"]
    assert sorted(t["thread_id"] for t in report["threads"]) == ["p1", "p2"]
    for t in report["threads"]:
        assert not t["served"] and t["version"] == "1"
        plan = t["plan"]
        assert "step 'old_only' was removed" in plan["changes"]
        # without a rename map, dropping `prep` (declared by `gate`) is refused
        assert any("'prep' is removed" in r for r in plan["refusals"])
        assert t["migrate"].startswith(f"longtask migrate {t['thread_id']} --to 2 --task ")
    assert _rows(db_url, "p1") == before

    text = run_cli("check", ONLY_V2, "--db", db_url, db="sqlite:///elsewhere.db")
    assert text.returncode == 1, text.stderr
    assert "NOT SERVED  p1 (waiting_user, version 1)" in text.stdout
    # the command to paste names the database this check was given
    assert f"longtask migrate p1 --db {db_url} --to 2" in text.stdout

    # code with v1 beside v2 serves both: exit 0
    ok = run_cli("check", BOTH, db=db_url)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "served  p1" in ok.stdout and "0 not served" in ok.stdout

    # the dry run's plan is what the migration then does
    args = ("migrate", "p1", "--to", "2", "--task", BOTH, "--map", "prep=prepare", "--by", "ops")
    dry = run_cli(*args, "--dry-run", "--json", db=db_url)
    assert dry.returncode == 0, dry.stderr
    assert _rows(db_url, "p1") == before
    real = run_cli(*args, "--json", db=db_url)
    assert real.returncode == 0, real.stderr
    assert json.loads(real.stdout) == json.loads(dry.stdout)
    with Runner(db_url) as runner:
        rec = runner.db.store.get_thread("p1")
        assert rec is not None and rec.definition["version"] == "2" and rec.task_ref == BOTH
        events = [e for e in runner.events("p1") if e.kind == "definition.migrated"]
        assert [e.data["plan"] for e in events] == [json.loads(dry.stdout)]

    # a refused one exits 1, names the reason, and leaves the thread as it was
    before = _rows(db_url, "p2")
    refused = run_cli("migrate", "p2", "--to", "2", "--task", BOTH, "--by", "ops", db=db_url)
    assert refused.returncode == 1
    assert "'prep' is removed" in refused.stderr
    assert _rows(db_url, "p2") == before

    # --all --from: the rest
    rest = run_cli(
        "migrate",
        "--all",
        "--from",
        "1",
        "--to",
        "2",
        "--task",
        BOTH,
        "--map",
        "prep=prepare",
        "--by",
        "ops",
        "--json",
        db=db_url,
    )
    assert rest.returncode == 0, rest.stderr
    assert [p["thread_id"] for p in json.loads(rest.stdout)] == ["p2"]
    assert run_cli("check", ONLY_V2, db=db_url).returncode == 0
