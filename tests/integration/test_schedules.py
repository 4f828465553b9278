"""Schedules on every backend: registering declared and ad-hoc schedules, firing due ticks
with an injected clock (one thread per tick, ids derived from the tick, a second fire
refused by the thread id, concurrent firing), catch-up after a gap, pause, resume and
removal, the CLI, ``tick``, ``serve``, and real workers on PostgreSQL.

No test waits for a cron minute: a schedule is made due by registering it with a clock in
the past."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import run_cli

from longtask import Runner, Schedule
from longtask.errors import InvalidInput, ScheduleNotFound
from longtask.model._schedule import latest_tick, tick_id
from longtask.runtime import load_task

HERE = Path(__file__).resolve().parent
REF = f"{HERE}/schedule_task.py:nightly"
PLAIN = f"{HERE}/schedule_task.py:plain"
#: 03:00 on the first of January, UTC: one tick a year, so real time never reaches another
#: while a test runs
YEARLY = "0 3 1 1 *"


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(at(2026, 12, 1, 0, 0))


@pytest.fixture
def timed(db_url: str, clock: Clock) -> Iterator[Runner]:
    with Runner(db_url, clock=clock) as r:
        yield r


def thread_ids(runner: Runner) -> list[str]:
    return sorted(t.thread_id for t in runner.threads(limit=1000))


def _until(what: str, ok: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


# -- registering -------------------------------------------------------------------------------


def test_declared_schedules_are_registered_updated_and_removed(timed: Runner) -> None:
    task = load_task(REF)
    often = task.schedules[1].name_for("nightly")
    assert timed.register_schedules(task, task_ref=REF) == [
        ("nightly", "added"),
        (often, "added"),
    ]
    assert timed.register_schedules(task, task_ref=REF) == [
        ("nightly", "unchanged"),
        (often, "unchanged"),
    ]
    rec = timed.schedule("nightly")
    assert (rec.cron, rec.timezone, rec.inputs, rec.origin) == (
        "0 3 * * *",
        "Europe/Paris",
        {"who": "paris"},
        "declared",
    )
    assert rec.next_fire_at == at(2026, 12, 1, 2, 0)  # 03:00 in Paris
    assert rec.next_fire_local().hour == 3
    timed.pause_schedule("nightly")

    # A later deploy: nightly moves to 04:00, the other schedule is gone from the code.
    v2 = load_task(f"{HERE}/schedule_task.py:nightly_v2")
    assert timed.register_schedules(v2, task_ref=REF) == [
        ("nightly", "updated"),
        (often, "removed"),
    ]
    rec = timed.schedule("nightly")
    assert rec.cron == "0 4 * * *" and rec.next_fire_at == at(2026, 12, 1, 3, 0)
    assert rec.paused  # a pause survives an update
    assert [s.name for s in timed.schedules()] == ["nightly"]


def test_ad_hoc_schedules_are_checked_and_names_are_not_taken_twice(timed: Runner) -> None:
    task = load_task(PLAIN)
    with pytest.raises(InvalidInput, match="inputs have unknown key 'whom'"):
        timed.add_schedule(task, Schedule(YEARLY, inputs={"whom": "x"}), task_ref=PLAIN)
    with pytest.raises(InvalidInput, match="timezone 'Nowhere/City' is unknown"):
        timed.add_schedule(
            task, Schedule(YEARLY, inputs={"who": "x"}, timezone="Nowhere/City"), task_ref=PLAIN
        )
    assert timed.schedules() == []  # bad input stores nothing

    rec, change = timed.add_schedule(
        task, Schedule(YEARLY, inputs={"who": "x"}, name="yearly"), task_ref=PLAIN
    )
    assert (rec.name, rec.origin, change) == ("yearly", "cli", "added")
    _, change = timed.add_schedule(
        task, Schedule(YEARLY, inputs={"who": "x"}, name="yearly"), task_ref=PLAIN
    )
    assert change == "unchanged"
    with pytest.raises(InvalidInput, match="schedule 'yearly' exists already"):
        timed.add_schedule(
            task, Schedule("0 4 * * *", inputs={"who": "x"}, name="yearly"), task_ref=PLAIN
        )
    # A declared schedule may not take the name of one added by hand.
    timed.add_schedule(task, Schedule(YEARLY, inputs={"who": "x"}, name="nightly"), task_ref=PLAIN)
    with pytest.raises(InvalidInput, match="schedule name 'nightly' is taken"):
        timed.register_schedules(load_task(REF), task_ref=REF)
    assert sorted(s.name for s in timed.schedules()) == ["nightly", "yearly"]


# -- firing ------------------------------------------------------------------------------------


def test_a_due_tick_starts_one_thread_named_after_it_and_a_second_fire_is_refused(
    timed: Runner, clock: Clock
) -> None:
    timed.register_schedules(load_task(f"{HERE}/schedule_task.py:nightly_v2"), task_ref=REF)
    assert timed.fire_due(launch="run") == []  # 04:00 Paris is 03:00 UTC: not yet
    assert thread_ids(timed) == []

    clock.now = at(2026, 12, 1, 3, 0, 30)
    [fired] = timed.fire_due(launch="run")
    assert (fired.schedule, fired.outcome, fired.missed) == ("nightly", "fired", 0)
    assert fired.thread_id == "nightly-20261201T0300Z"
    assert thread_ids(timed) == ["nightly-20261201T0300Z"]
    status = timed.status("nightly-20261201T0300Z")
    assert status.status == "completed"
    assert timed.result("nightly-20261201T0300Z", "greet") == {"hello": "paris"}
    assert status.schedule is not None
    assert status.schedule["name"] == "nightly"
    assert status.schedule["next_fire_at"] == "2026-12-02T03:00:00+00:00"
    assert status.schedule["next_fire_local"] == "2026-12-02T04:00:00+01:00"
    rec = timed.schedule("nightly")
    assert rec.last_thread == "nightly-20261201T0300Z"
    assert rec.next_fire_at == at(2026, 12, 2, 3, 0)

    assert timed.fire_due(launch="run") == []  # moved on: nothing due

    # A process that died after starting the thread but before moving the schedule on:
    # the next fire finds the tick's thread and counts it as fired.
    timed.db.store._run(
        "UPDATE longtask_schedules SET next_fire_at = ? WHERE name = ?",
        (at(2026, 12, 1, 3, 0).timestamp(), "nightly"),
    )
    [again] = timed.fire_due(launch="run")
    assert (again.outcome, again.thread_id) == ("already fired", "nightly-20261201T0300Z")
    assert thread_ids(timed) == ["nightly-20261201T0300Z"]
    assert timed.schedule("nightly").next_fire_at == at(2026, 12, 2, 3, 0)
    assert timed.status("nightly-20261201T0300Z").runs == 1  # not run again


def test_concurrent_firing_starts_one_thread_per_tick(db_url: str, clock: Clock) -> None:
    task = load_task(PLAIN)
    with Runner(db_url, clock=clock) as setup:
        for i in range(6):
            setup.add_schedule(
                task, Schedule("0 * * * *", inputs={"who": str(i)}, name=f"s{i}"), task_ref=PLAIN
            )
    now = at(2026, 12, 1, 5, 0, 10)  # five hourly ticks missed: the latest fires
    barrier = threading.Barrier(3)
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def fire() -> None:
        try:
            with Runner(db_url) as r:
                barrier.wait()
                got = r.fire_due(now, launch="run")
                results.append([f"{f.schedule}:{f.outcome}" for f in got])
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=fire) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert not errors, errors
    fired = sorted(x for r in results for x in r if x.endswith(":fired"))
    assert fired == [f"s{i}:fired" for i in range(6)]
    with Runner(db_url) as r:
        assert thread_ids(r) == sorted(f"s{i}-20261201T0500Z" for i in range(6))
        assert all(r.status(t).status == "completed" for t in thread_ids(r))


def test_catch_up_one_runs_the_latest_missed_tick_and_none_skips_them(
    timed: Runner, clock: Clock
) -> None:
    task = load_task(PLAIN)
    for catch_up in ("one", "none"):
        timed.add_schedule(
            task,
            Schedule("0 3 * * *", inputs={"who": catch_up}, catch_up=catch_up, name=catch_up),  # type: ignore[arg-type]
            task_ref=PLAIN,
        )
    # Nothing fired for three days (every worker down); back at 09:00 on the 4th.
    clock.now = at(2026, 12, 4, 9, 0)
    fired = {f.schedule: f for f in timed.fire_due(launch="run")}
    assert (fired["one"].outcome, fired["one"].thread_id, fired["one"].missed) == (
        "fired",
        "one-20261204T0300Z",
        3,
    )
    assert (fired["none"].outcome, fired["none"].thread_id, fired["none"].missed) == (
        "missed",
        None,
        4,
    )
    assert thread_ids(timed) == ["one-20261204T0300Z"]
    assert timed.schedule("none").next_fire_at == at(2026, 12, 5, 3, 0)

    # On time (within the grace window), catch_up="none" fires like any schedule.
    clock.now = at(2026, 12, 5, 3, 1)
    fired = {f.schedule: f for f in timed.fire_due(launch="run")}
    assert fired["none"].outcome == "fired" and fired["one"].outcome == "fired"
    assert thread_ids(timed) == [
        "none-20261205T0300Z",
        "one-20261204T0300Z",
        "one-20261205T0300Z",
    ]


def test_pause_resume_and_rm(timed: Runner, clock: Clock) -> None:
    task = load_task(PLAIN)
    timed.add_schedule(task, Schedule("0 3 * * *", inputs={"who": "p"}, name="p"), task_ref=PLAIN)
    timed.add_schedule(task, Schedule("0 3 * * *", inputs={"who": "r"}, name="r"), task_ref=PLAIN)
    assert timed.pause_schedule("p").paused
    clock.now = at(2026, 12, 3, 4, 0)
    assert [f.schedule for f in timed.fire_due(launch="run")] == ["r"]

    # Resumed: the ticks of the pause are not caught up; the next one fires.
    rec = timed.resume_schedule("p")
    assert not rec.paused and rec.next_fire_at == at(2026, 12, 4, 3, 0)
    assert timed.fire_due(launch="run") == []
    clock.now = at(2026, 12, 4, 3, 0)
    timed.remove_schedule("r")
    assert [f.thread_id for f in timed.fire_due(launch="run")] == ["p-20261204T0300Z"]
    assert thread_ids(timed) == ["p-20261204T0300Z", "r-20261203T0300Z"]
    # The thread outlives its schedule.
    assert timed.status("r-20261203T0300Z").schedule == {
        "name": "r",
        "tick": "2026-12-03T03:00:00+00:00",
        "registered": False,
    }
    with pytest.raises(ScheduleNotFound, match="no schedule 'r'; the schedules are 'p'"):
        timed.remove_schedule("r")
    with pytest.raises(ScheduleNotFound):
        timed.pause_schedule("nope")


def test_a_task_that_no_longer_loads_keeps_its_tick_due(
    timed: Runner, clock: Clock, tmp_path: Path
) -> None:
    module = tmp_path / "gone_task.py"
    module.write_text((HERE / "schedule_task.py").read_text())
    ref = f"{module}:plain"
    timed.add_schedule(
        load_task(ref), Schedule("0 3 * * *", inputs={"who": "x"}, name="gone"), task_ref=ref
    )
    module.unlink()
    clock.now = at(2026, 12, 1, 3, 0)
    [fired] = timed.fire_due(launch="run")
    assert fired.outcome.startswith("error: ") and "does not exist" in fired.outcome
    rec = timed.schedule("gone")
    assert rec.next_fire_at == at(2026, 12, 1, 3, 0)  # still due
    assert rec.last_error is not None and "gone_task.py" in rec.last_error
    assert thread_ids(timed) == []

    # Deployed again: the tick fires, late, once.
    module.write_text((HERE / "schedule_task.py").read_text())
    clock.now = at(2026, 12, 1, 3, 20)
    [fired] = timed.fire_due(launch="run")
    assert (fired.outcome, fired.thread_id) == ("fired", "gone-20261201T0300Z")
    assert timed.schedule("gone").last_error is None


def test_a_fired_thread_never_started_is_started_by_the_next_fire(
    timed: Runner, clock: Clock
) -> None:
    """The process that fired the tick stopped before starting its thread."""
    timed.add_schedule(
        load_task(PLAIN), Schedule("0 3 * * *", inputs={"who": "x"}, name="x"), task_ref=PLAIN
    )
    clock.now = at(2026, 12, 1, 3, 0)
    left: list[str] = []
    assert len(timed.fire_due(launch=left.append)) == 1  # recorded, never started
    assert left == ["x-20261201T0300Z"]
    assert timed.status("x-20261201T0300Z").status == "pending"
    assert timed.fire_due(launch="run") == []  # nothing due, but the thread is started
    assert timed.status("x-20261201T0300Z").status == "completed"
    assert timed.status("x-20261201T0300Z").runs == 1
    timed.fire_due(launch="run")
    assert timed.status("x-20261201T0300Z").runs == 1


# -- CLI ---------------------------------------------------------------------------------------


def test_cli_add_ls_pause_resume_rm(db_url: str) -> None:
    added = run_cli("schedule", "add", REF, db=db_url)
    assert added.returncode == 0, added.stderr
    assert "nightly: added" in added.stdout
    assert "Europe/Paris" in added.stdout and "UTC)" in added.stdout

    adhoc = run_cli(
        "schedule",
        "add",
        PLAIN,
        "--cron",
        YEARLY,
        "--input",
        '{"who": "cli"}',
        "--timezone",
        "America/New_York",
        "--catch-up",
        "none",
        "--name",
        "yearly",
        db=db_url,
    )
    assert adhoc.returncode == 0, adhoc.stderr
    bad = run_cli("schedule", "add", PLAIN, "--cron", "0 3 * *", "--input", "{}", db=db_url)
    assert bad.returncode == 1
    assert "has 4 fields; give five" in bad.stderr and "who: Field required" in bad.stderr

    listed = json.loads(run_cli("schedule", "ls", "--json", db=db_url).stdout)
    by_name = {s["name"]: s for s in listed}
    assert set(by_name) == {"nightly", load_task(REF).schedules[1].name_for("nightly"), "yearly"}
    yearly = by_name["yearly"]
    assert (yearly["timezone"], yearly["catch_up"], yearly["inputs"]) == (
        "America/New_York",
        "none",
        {"who": "cli"},
    )
    assert yearly["next_fire_local"].endswith("T03:00:00-05:00")
    assert yearly["next_fire_at"].endswith("T08:00:00+00:00")

    assert run_cli("schedule", "pause", "yearly", db=db_url).returncode == 0
    text = run_cli("schedule", "ls", db=db_url).stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("yearly"))
    assert "paused" in line and "catch-up=none" in line

    missing = run_cli("schedule", "rm", "nope", db=db_url)
    assert missing.returncode == 1
    assert "no schedule 'nope'; the schedules are" in missing.stderr
    assert "'yearly'" in missing.stderr

    assert "resumed; next" in run_cli("schedule", "resume", "yearly", db=db_url).stdout
    removed = run_cli("schedule", "rm", "nightly", db=db_url)
    assert removed.returncode == 0
    assert "adds it again" in removed.stdout  # a declared one comes back with `add`
    names = [s["name"] for s in json.loads(run_cli("schedule", "ls", "--json", db=db_url).stdout)]
    assert "nightly" not in names and "yearly" in names


def test_cli_refuses_options_without_cron_and_a_task_with_no_schedules(db_url: str) -> None:
    stray = run_cli("schedule", "add", REF, "--timezone", "UTC", db=db_url)
    assert stray.returncode == 2 and "goes with --cron" in stray.stderr
    none = run_cli("schedule", "add", PLAIN, db=db_url)
    assert none.returncode == 2 and "declares no schedules" in none.stderr


def _due_in_real_time(db_url: str, *names: str) -> datetime:
    """Schedules of PLAIN registered a year and more ago: the latest yearly tick is due."""
    past = datetime.now(UTC) - timedelta(days=400)
    with Runner(db_url, clock=lambda: past) as r:
        for name in names:
            r.add_schedule(
                load_task(PLAIN), Schedule(YEARLY, inputs={"who": name}, name=name), task_ref=PLAIN
            )
    return latest_tick(YEARLY, "UTC", datetime.now(UTC))


def test_tick_fires_due_schedules_from_cron(sqlite_url: str) -> None:
    tick = _due_in_real_time(sqlite_url, "cron")
    done = run_cli("tick", db=sqlite_url)
    assert done.returncode == 0, done.stderr
    thread = tick_id("cron", tick)
    assert f"schedule cron: fired thread {thread} (completed)" in done.stdout
    status = run_cli("status", thread, db=sqlite_url)
    assert "started by schedule cron; next fire" in status.stdout
    again = run_cli("tick", "--json", db=sqlite_url)
    assert json.loads(again.stdout) == []


def test_two_ticks_at_once_start_one_thread_per_schedule(db_url: str) -> None:
    tick = _due_in_real_time(db_url, "a", "b", "c")
    env = {**os.environ, "LONGTASK_DB": db_url}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "longtask", "tick", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    fired = [e for out, _ in outputs for e in json.loads(out) if e["outcome"] == "fired"]
    assert sorted(e["thread_id"] for e in fired) == [tick_id(n, tick) for n in "abc"]
    with Runner(db_url) as r:
        assert thread_ids(r) == [tick_id(n, tick) for n in "abc"]


# -- serve -------------------------------------------------------------------------------------


def test_serve_fires_due_schedules_and_lists_them(sqlite_url: str) -> None:
    from starlette.testclient import TestClient

    from longtask.serve import create_app
    from longtask.serve._registry import load_registry

    tick = _due_in_real_time(sqlite_url, "served")
    thread = tick_id("served", tick)
    registry = load_registry([REF])  # its declared schedules are registered at start
    with Runner(sqlite_url) as runner:
        app = create_app(runner, {}, registry=registry, schedule_poll=0.05)
        with TestClient(app) as client:
            _until(
                "serve to fire and run the schedule",
                lambda: (
                    (rec := runner.db.store.get_thread(thread)) is not None
                    and rec.status == "completed"
                ),
            )
            listed = client.get("/api/schedules").json()
            status = client.get(f"/api/threads/{thread}").json()
        often = load_task(REF).schedules[1].name_for("nightly")
        assert sorted(s["name"] for s in listed) == sorted(["served", "nightly", often])
        served = next(s for s in listed if s["name"] == "served")
        assert served["last_thread"] == thread
        assert status["schedule"]["name"] == "served"
        assert thread_ids(runner) == [thread]


# -- workers (PostgreSQL) ----------------------------------------------------------------------


@pytest.fixture
def workers(pg_url: str, tmp_path: Path) -> Iterator[Callable[[str], subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start(name: str) -> subprocess.Popen[str]:
        log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            [sys.executable, "-m", "longtask", "worker", "--stalled-after", "1", "--name", name],
            env={**os.environ, "LONGTASK_DB": pg_url},
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def test_workers_fire_a_missed_tick_once_and_run_its_thread(
    pg_url: str, workers: Callable[[str], subprocess.Popen[str]]
) -> None:
    tick = _due_in_real_time(pg_url, "missed")
    thread = tick_id("missed", tick)
    for name in ("w1", "w2", "w3"):
        workers(name)
    with Runner(pg_url) as runner:
        _until(
            "a worker to fire the missed tick and complete its thread",
            lambda: (
                (rec := runner.db.store.get_thread(thread)) is not None
                and rec.status == "completed"
            ),
        )
        assert runner.result(thread, "greet") == {"hello": "missed"}
        assert runner.status(thread).schedule is not None
        # Every worker kept firing meanwhile: still the one thread.
        time.sleep(1)
        assert thread_ids(runner) == [thread]
        rec = runner.schedule("missed")
        assert rec.last_thread == thread and rec.next_fire_at > datetime.now(UTC)


def test_the_crontab_line_names_the_sqlite_database_by_its_absolute_path(tmp_path: Path) -> None:
    """Issue 29, point 8: cron runs in $HOME, so a relative sqlite:///.longtask/... names
    another database there. The printed line, run from elsewhere, ticks this one."""
    work, home = tmp_path / "project", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    for args in (["schedule", "add", REF], ["schedule", "ls"]):
        shown = run_cli(*args, db="sqlite:///.longtask/longtask.db", cwd=work)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        (line,) = [ln for ln in shown.stdout.splitlines() if "crontab:" in ln]
        command = line.split("* * * * * ", 1)[1]
        assert f"--db sqlite:///{work.resolve() / '.longtask' / 'longtask.db'}" in command
        words = shlex.split(command)
        ticked = run_cli(*words[1:], db="", cwd=home)
        assert ticked.returncode == 0, ticked.stdout + ticked.stderr
        assert not (home / ".longtask").exists()
        # Issue 45: and with cron's PATH, where a virtualenv's `longtask` is not found, by
        # the absolute path of the longtask that printed it.
        assert Path(words[0]).is_absolute(), command
        cron = subprocess.run(
            words,
            cwd=home,
            env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cron.returncode == 0, cron.stdout + cron.stderr
