"""Checked migrations (issue 30) on SQLite and PostgreSQL: threads paused on v1 of a task
move to v2 (a step renamed, one removed, one added) with the plan the dry run showed; each
refusal leaves every row of the thread as it was; ``definition.migrated`` and
``definition.forced`` are recorded."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from longtask import DefinitionChanged, LongTaskError, MigrationRefused, Runner
from longtask.runtime import load_versions
from longtask.store._owned import carried_tables, read_rows

HERE = Path(__file__).parent
FAMILY = f"{HERE / 'migrate_task.py'}:family"
#: the task file, loaded by reference as every process loads it
m: Any = sys.modules[str(load_versions(FAMILY).newest._module)]


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    m.ran.clear()
    yield
    m.ran.clear()


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


def rows(runner: Runner, thread_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row the thread owns (checkpoints, writes, values, record, events, ...)."""
    runner.db.saver.release(thread_id)
    return {t.name: read_rows(runner.db.store, t, thread_id) for t in carried_tables()}


def paused(runner: Runner, thread_id: str = "t1") -> str:
    runner.start(m.v1, {}, thread_id=thread_id)
    assert runner.status(thread_id).status == "waiting_user"
    return thread_id


def test_dry_run_plan_is_what_the_migration_does(runner: Runner) -> None:
    tid = paused(runner)
    before = rows(runner, tid)
    dry = runner.migrate(tid, m.v2, renames={"prep": "prepare"}, dry_run=True, by="ops")
    assert rows(runner, tid) == before  # a dry run writes nothing
    assert dry.ok, dry.refusals
    assert dry.kept == {"prepare": "prep"}
    assert dry.dropped == {"old_only": True}
    assert dry.pauses_kept == ["ci", "gate"] and dry.pauses_reasked == []
    assert dry.will_run == ["gate", "ci", "ship", "extra"]

    real = runner.migrate(tid, m.v2, renames={"prep": "prepare"}, by="ops")
    assert real == dry
    rec = runner.db.store.get_thread(tid)
    assert rec is not None and rec.definition_hash == m.v2.definition_hash
    assert rec.task_version == m.v2.version  # status and ls show what it runs on now
    # the state on v2 holds exactly the kept results, and waits at the kept pauses
    state = runner.graph(m.v2).get_state({"configurable": {"thread_id": tid}})
    assert {k[4:] for k in state.values if k.startswith("out.")} == set(dry.kept)
    assert {p.step for p in runner.pending(tid)} == set(dry.pauses_kept)
    migrated = [e for e in runner.events(tid) if e.kind == "definition.migrated"]
    assert len(migrated) == 1
    assert migrated[0].data == {"by": "ops", "plan": dry.to_json()}
    # the event is in the transaction of the migration's checkpoint: both or neither
    cps = rows(runner, tid)["longtask_cp_checkpoints"]
    assert len(cps) == len(before["longtask_cp_checkpoints"]) + 1

    # the kept approval's plan is unchanged, so its pending request is answered as it was
    runner.signal(tid, "ci", {"ok": True}, by="ci")
    runner.approve(tid, "gate", by="alice")
    assert runner.status(tid).status == "completed"
    assert m.ran == {"prep@1": 1, "old_only@1": 1, "ship@2": 1, "extra@2": 1}


def test_a_changed_plan_is_asked_again(runner: Runner) -> None:
    tid = paused(runner)
    old_hash = next(p for p in runner.pending(tid) if p.step == "gate").request["plan_hash"]
    dry = runner.migrate(tid, m.v2b, renames={"prep": "prepare"}, dry_run=True, by="ops")
    assert dry.pauses_reasked == ["gate"] and dry.pauses_kept == ["ci"]
    assert runner.migrate(tid, m.v2b, renames={"prep": "prepare"}, by="ops") == dry
    gate = next(p for p in runner.pending(tid) if p.step == "gate")
    assert gate.request["plan"] == {"ship": "app-1.tar.gz", "channel": "beta"}
    assert gate.request["plan_hash"] != old_hash


def test_pauses_behind_a_new_step_are_asked_again_after_it(runner: Runner) -> None:
    tid = paused(runner)
    dry = runner.migrate(tid, m.v5, renames={"prep": "prepare"}, dry_run=True, by="ops")
    assert dry.pauses_reasked == ["ci", "gate"] and dry.pauses_kept == []
    assert dry.will_run == ["scan", "gate", "ci", "ship"]
    assert runner.migrate(tid, m.v5, renames={"prep": "prepare"}, by="ops") == dry
    # the new step ran on the way, and both pauses wait again, behind it
    assert m.ran["scan@5"] == 1
    assert {p.step for p in runner.pending(tid)} == {"ci", "gate"}
    runner.signal(tid, "ci", {"ok": True}, by="ci")
    runner.approve(tid, "gate", by="alice")
    assert runner.status(tid).status == "completed"
    assert m.ran["prepare@2"] == 0 and m.ran["ship@2"] == 1


def test_a_failed_thread_moves_and_resumes_on_the_new_code(runner: Runner) -> None:
    tid = paused(runner)
    m.broken.add("ship")
    try:
        runner.signal(tid, "ci", {"ok": True}, by="ci")
        with pytest.raises(LongTaskError):
            runner.approve(tid, "gate", by="alice")
    finally:
        m.broken.discard("ship")
    assert runner.status(tid).status == "failed"
    plan = runner.migrate(tid, m.v2, renames={"prep": "prepare"}, by="ops")
    # the answered pauses keep their results; the failed step runs again, on v2
    assert set(plan.kept) == {"prepare", "gate", "ci"}
    assert plan.will_run == ["ship", "extra"]
    assert runner.status(tid).status == "failed"  # a failed thread is resumed by a person
    runner.resume(tid)
    assert runner.status(tid).status == "completed"
    assert m.ran["ship@1"] == 1 and m.ran["ship@2"] == 1 and m.ran["extra@2"] == 1


def _refused(runner: Runner, tid: str, to: Any, **kw: Any) -> MigrationRefused:
    before = rows(runner, tid)
    for dry_run in (True, False):
        if dry_run:
            assert not runner.migrate(tid, to, dry_run=True, by="ops", **kw).ok
            continue
        with pytest.raises(MigrationRefused) as info:
            runner.migrate(tid, to, by="ops", **kw)
    assert rows(runner, tid) == before
    return info.value


def test_refused_lost_result_still_referenced(runner: Runner) -> None:
    tid = paused(runner)
    # without the rename, v2 drops `prep`, whose result `gate` declared (after=)
    exc = _refused(runner, tid, m.v2)
    assert any("'prep' is removed" in r and "'gate'" in r for r in exc.refusals)
    assert "--map" in str(exc)
    exc = _refused(runner, tid, m.v3)
    assert any("'prep' is removed" in r for r in exc.refusals)


def test_refused_skipping_a_pending_pause(runner: Runner) -> None:
    tid = paused(runner)
    exc = _refused(runner, tid, m.v4, renames={"prep": "prepare"})
    assert exc.plan.pauses_dropped == ["gate"]
    assert any("pause 'gate' is pending" in r and "--map gate=NEW" in r for r in exc.refusals)
    # mapped to its new name, the same pending approval is kept
    plan = runner.migrate(tid, m.v4, renames={"prep": "prepare", "gate": "sign_off"}, by="ops")
    assert plan.pauses_kept == ["ci", "sign_off"]
    assert {p.step for p in runner.pending(tid)} == {"ci", "sign_off"}


def test_refused_thread_held_by_another_process(runner: Runner, db_url: str) -> None:
    tid = paused(runner)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom longtask import Runner\n"
            f"r = Runner({db_url!r})\n"
            f"with r.db.lock({tid!r}):\n    print('held', flush=True)\n    sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        exc = _refused(runner, tid, m.v2, renames={"prep": "prepare"})
        assert any("held by another process" in r for r in exc.refusals)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)


def test_refused_finished_or_same_definition(runner: Runner) -> None:
    tid = paused(runner)
    exc = _refused(runner, tid, m.v1)
    assert any("already runs on version 1" in r for r in exc.refusals)
    runner.cancel(tid, by="ops")
    exc = _refused(runner, tid, m.v2, renames={"prep": "prepare"})
    assert any("is cancelled: there is nothing to migrate" in r for r in exc.refusals)


def test_migrate_all_from_a_version(runner: Runner) -> None:
    for tid in ("a1", "a2"):
        paused(runner, tid)
    plans = runner.migrate_all(FAMILY, "1", "2", renames={"prep": "prepare"}, by="ops")
    assert sorted(p.thread_id for p in plans) == ["a1", "a2"]
    assert all(p.ok for p in plans)
    for tid in ("a1", "a2"):
        rec = runner.db.store.get_thread(tid)
        assert rec is not None and rec.definition_hash == m.v2.definition_hash


def test_forced_change_is_recorded(runner: Runner) -> None:
    tid = paused(runner)
    with pytest.raises(DefinitionChanged):
        runner.resume(tid, task=m.v2)
    # unchecked: v2's gate looks for `prepare`, which this thread never ran, and fails
    with pytest.raises(LongTaskError):
        runner.resume(tid, task=m.v2, allow_changed_definition=True, by="ops")
    forced = [e for e in runner.events(tid) if e.kind == "definition.forced"]
    assert len(forced) == 1
    data = forced[0].data
    assert data["from_hash"] == m.v1.definition_hash
    assert data["to_hash"] == m.v2.definition_hash
    assert data["by"] == "ops" and "step 'old_only' was removed" in data["changes"]
    rec = runner.db.store.get_thread(tid)
    assert rec is not None and rec.task_version == m.v2.version


def test_a_renamed_step_keeps_its_usage_under_its_new_name(runner: Runner) -> None:
    """Issue 45: after ``--map prep=prepare`` status listed ``prep (fix agent)``: the usage
    row stayed under the old name, which the new definition does not declare."""
    tid = paused(runner)
    before = runner.status(tid)
    prep = next(s for s in before.steps if s.name == "prep").usage
    assert prep is not None and prep["attempts"] == 1
    runner.migrate(tid, m.v2, renames={"prep": "prepare"}, by="ops")
    after = runner.status(tid)
    assert after.usage is not None and "prep" not in after.usage.other, after.usage.other
    prepare = next(s for s in after.steps if s.name == "prepare").usage
    assert prepare is not None and prepare["attempts"] == 1
    assert prepare["wall_time"] == prep["wall_time"]
    # the dropped step's row stays (what it used is part of the thread's cost), named for
    # what it is: not a fix agent
    assert after.usage.other_label("old_only") == "old_only (removed step)"
    assert after.usage.fix_agents == []
