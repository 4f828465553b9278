"""Map steps survive a crash inside an item: ``longtask resume`` finishes the map, items that
finished before the crash are not run again, and at most ``max_parallel`` items (those in
flight) run twice (both backends).

The process dies with ``os._exit(1)`` inside an item, so the item has started (its call is
recorded in an outside counter) but has no outcome. Items that finished first have an
outcome in ``longtask_map_items`` and must not run again; the crashed item and the items
still in flight run again on resume.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter, defaultdict
from pathlib import Path

import map_crash_task as mct
import pytest
from conftest import run_cli

from longtask import Runner

HERE = Path(__file__).resolve().parent
TASK_FILE = HERE / "map_crash_task.py"
COUNT = 40
MAP_STEP = "square"

# (task attribute, max_parallel, item to crash in, items sleep)
CASES = {
    # item 6 of a map with max_parallel=4
    "item6": ("task", 4, 6, False),
    # item 29 of a map with max_parallel=8; items sleep 0.05-0.2 s; the crashing one sleeps
    # 0.12 s and waits until 25 items are done, so at the crash siblings are both done and
    # (very likely) in flight
    "item29-in-flight": ("wide", 8, 29, True),
}


def _ok_items(db_url: str, thread: str) -> set[int]:
    """Items of the map step with a successful outcome recorded in longtask_map_items."""
    sql = (
        "SELECT idx FROM longtask_map_items WHERE thread_id = {p} AND step = {p} AND status = 'ok'"
    )
    if db_url.startswith("sqlite:///"):
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        try:
            rows = conn.execute(sql.format(p="?"), (thread, MAP_STEP)).fetchall()
        finally:
            conn.close()
    else:
        import psycopg

        with psycopg.connect(db_url, autocommit=True) as pg:
            rows = pg.execute(sql.format(p="%s"), (thread, MAP_STEP)).fetchall()  # type: ignore[arg-type]
    return {int(r[0]) for r in rows}


def _wait_inactive(db_url: str, thread_id: str) -> None:
    """The dead process's lock goes away with it; on PostgreSQL the server notices the closed
    connection a moment later, so poll (bounded) rather than race it."""
    deadline = time.monotonic() + 10
    with Runner(db_url) as runner:
        while runner.status(thread_id).active and time.monotonic() < deadline:
            time.sleep(0.05)


@pytest.mark.parametrize("case", list(CASES))
def test_crash_inside_an_item_then_resume(db_url: str, tmp_path: Path, case: str) -> None:
    attr, max_parallel, crash_item, sleep = CASES[case]
    thread = f"map-crash-{case}"
    counter_db = tmp_path / "calls.db"
    marker = tmp_path / "crashed"
    env = {
        mct.COUNTER_ENV: str(counter_db),
        "LT_CRASH_ITEM": str(crash_item),
        "LT_CRASH_MARKER": str(marker),
        "LT_ITEM_SLEEP": "1" if sleep else "",
    }
    wait_done = crash_item - crash_item % max_parallel + 1
    if sleep:
        env["LT_CRASH_WAIT_DONE"] = str(wait_done)

    # 1. The run dies inside item `crash_item`.
    first = run_cli(
        "run", f"{TASK_FILE}:{attr}", "--thread", thread, "--input",
        json.dumps({"count": COUNT}), db=db_url, env=env,
    )  # fmt: skip
    assert first.returncode != 0, first.stdout + first.stderr
    assert marker.exists(), f"the process did not crash in item {crash_item}:\n{first.stderr}"
    before = Counter(i for i, _ in mct.item_calls(counter_db))
    assert before[crash_item] == 1
    # A sliding window: items start in item order, each once, and item i starts only once
    # a worker is free, i.e. when at least i - max_parallel + 1 items have their outcome
    # stored; so at most max_parallel started items have none at the crash. (An item's
    # call is recorded first thing, but items in flight may die before their record.)
    assert max(before.values()) == 1, before
    ok_at_crash = _ok_items(db_url, thread)
    assert crash_item not in ok_at_crash
    assert ok_at_crash <= set(before), (sorted(ok_at_crash), sorted(before))
    assert max(before) < len(ok_at_crash) + max_parallel, (sorted(before), sorted(ok_at_crash))
    in_flight = set(range(max(before) + 1)) - ok_at_crash
    assert len(in_flight) <= max_parallel, sorted(in_flight)
    assert [s for s, _ in mct.step_calls(counter_db)] == ["numbers"]
    if sleep:
        # the crashing item waited for siblings: the crash came after they had finished
        assert len(ok_at_crash) >= wait_done, sorted(ok_at_crash)

    _wait_inactive(db_url, thread)
    with Runner(db_url) as runner:
        st = runner.status(thread)
        assert st.status == "running"  # what the dead process left behind
        assert not st.active
        square = next(s for s in st.steps if s.name == MAP_STEP)
        assert square.state != "completed"
        assert square.items_total == COUNT
        assert square.items_done == len(ok_at_crash)

    # 2. Resume from another process finishes the thread.
    second = run_cli("resume", thread, db=db_url, env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"thread {thread} completed" in second.stdout

    # 3. The outside counter: every item ran, at most twice; only the crashed item and
    # the items in flight with it (no outcome yet) ran twice; each ran at most once per
    # process.
    calls = mct.item_calls(counter_db)
    runs = Counter(i for i, _ in calls)
    assert set(runs) == set(range(COUNT)), sorted(set(range(COUNT)) - set(runs))
    assert max(runs.values()) <= 2, runs
    assert runs[crash_item] == 2
    twice = {i for i, n in runs.items() if n == 2}
    assert len(twice) <= max_parallel, sorted(twice)
    assert twice <= in_flight, (sorted(twice), sorted(ok_at_crash))
    for i in ok_at_crash:
        assert runs[i] == 1, (i, runs[i])
    pids: defaultdict[int, list[int]] = defaultdict(list)
    for i, pid in calls:
        pids[i].append(pid)
    assert all(len(set(p)) == len(p) for p in pids.values()), dict(pids)
    # the plain steps before and after the map ran once each
    assert Counter(s for s, _ in mct.step_calls(counter_db)) == {"numbers": 1, "total": 1}

    # 4. Status (CLI, JSON): completed, every item of the map done, none failed.
    shown = run_cli("status", thread, "--json", db=db_url, env=env)
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["status"] == "completed"
    assert status["runs"] == 2
    assert {s["state"] for s in status["steps"]} == {"completed"}
    square_view = next(s for s in status["steps"] if s["name"] == MAP_STEP)
    assert square_view["kind"] == "map"
    assert (square_view["items_done"], square_view["items_total"]) == (COUNT, COUNT)
    assert square_view["items_failed"] == []

    # 5. The result is complete and in item order, and the next step read all of it.
    with Runner(db_url) as runner:
        assert runner.result(thread, MAP_STEP) == [{"i": i, "square": i * i} for i in range(COUNT)]
        assert runner.result(thread, "total") == sum(i * i for i in range(COUNT))

        # 6. Progress events: done/total counts, growing to the full count.
        progress = runner.events(thread, kinds=["step.progress"])
        assert progress, "no step.progress events"
        assert all(e.step == MAP_STEP for e in progress)
        assert all(e.data["total"] == COUNT for e in progress)
        done = [e.data["done"] for e in progress]
        assert done == sorted(done), done
        assert done[-1] == COUNT
        assert all(e.data["failed"] == 0 for e in progress)
        # at most one event per max_parallel finished items in each run, and one at the end
        # (fewer when items finish faster than one event per half second)
        waves = -(-COUNT // max_parallel)
        assert len(progress) <= waves + 1, done

        kinds = [e.kind for e in runner.events(thread)]
        assert kinds.count("longtask.started") == 1
        assert kinds.count("longtask.completed") == 1
        assert kinds.count("step.completed") == 3
