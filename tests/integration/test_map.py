"""Map steps against every backend: item errors, retries, parallelism, resume, storage."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from longtask import (
    DefinitionError,
    ItemContext,
    LongTask,
    Retry,
    Runner,
    Stage,
    StepContext,
    StepFailed,
    function_step,
    map_step,
)


def contracts_task(
    calls: Counter[int],
    bad: set[int],
    policy: str = "fail",
    max_parallel: int = 8,
    retry: Retry | None = None,
) -> LongTask:
    @function_step
    def upload(ctx: StepContext) -> list[str]:
        return [f"contract-{i:02d}" for i in range(ctx.inputs["count"])]

    def over(ctx: StepContext) -> list[str]:
        return list(ctx.result("upload"))

    @map_step(over=over, max_parallel=max_parallel, on_item_error=policy, retry=retry)  # type: ignore[arg-type]
    def parse(ctx: ItemContext, item: str) -> dict[str, Any]:
        calls[ctx.item_index] += 1
        assert item == ctx.item
        if ctx.item_index in bad:
            raise ValueError(f"cannot parse {item}")
        return {"name": item, "index": ctx.item_index}

    @function_step
    def merge(ctx: StepContext) -> Any:
        return ctx.result("parse")

    return LongTask(
        "contracts",
        stages=[Stage("ingest", [upload]), Stage("read", [parse]), Stage("report", [merge])],
    )


def test_collect_keeps_results_and_errors(runner: Runner) -> None:
    calls: Counter[int] = Counter()
    task = contracts_task(calls, bad={4, 17, 31}, policy="collect")
    thread = runner.start(task, {"count": 40})
    result = runner.result(thread, "merge")
    assert [r["index"] for r in result["results"]] == [i for i in range(40) if i not in {4, 17, 31}]
    assert [(e["index"], e["item"]) for e in result["errors"]] == [
        (4, "contract-04"),
        (17, "contract-17"),
        (31, "contract-31"),
    ]
    assert all("ValueError: cannot parse" in e["error"] for e in result["errors"])
    step = next(s for s in runner.status(thread).steps if s.name == "parse")
    assert (step.state, step.items_done, step.items_total) == ("completed", 37, 40)
    assert [f["index"] for f in step.items_failed or []] == [4, 17, 31]
    progress = runner.events(thread, kinds=["step.progress"])
    assert progress and progress[-1].data["done"] == 37 and progress[-1].data["failed"] == 3
    assert progress[-1].data["total"] == 40
    assert [p.data["done"] + p.data["failed"] for p in progress] == sorted(
        p.data["done"] + p.data["failed"] for p in progress
    )
    assert calls == Counter({i: 1 for i in range(40)})


def test_skip_drops_failed_items(runner: Runner) -> None:
    task = contracts_task(Counter(), bad={0, 9}, policy="skip", max_parallel=3)
    thread = runner.start(task, {"count": 10})
    assert [r["index"] for r in runner.result(thread, "parse")] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_fail_then_resume_reruns_only_failed_and_unfinished(runner: Runner) -> None:
    calls: Counter[int] = Counter()
    bad = {9}
    task = contracts_task(calls, bad=bad, max_parallel=4)
    with pytest.raises(StepFailed, match=r"cannot parse contract-09 \(item 9\)"):
        runner.start(task, {"count": 20}, thread_id="t-map")
    st = runner.status("t-map")
    parse = next(s for s in st.steps if s.name == "parse")
    assert st.status == "failed" and st.error and st.error["item"] == 9
    assert parse.state == "failed" and [f["index"] for f in parse.items_failed or []] == [9]
    # Items start in item order and each ran once; the items before 9 had all started, and
    # the map waited for the items in flight to finish (so their results are stored).
    assert set(calls) == set(range(max(calls) + 1)) and max(calls.values()) == 1
    assert {i: calls[i] for i in range(10)} == {i: 1 for i in range(10)}
    bad.clear()
    runner.resume("t-map", task=task)
    assert [r["index"] for r in runner.result("t-map", "merge")] == list(range(20))
    assert calls == Counter({**{i: 1 for i in range(20)}, 9: 2})


def test_item_retries_and_parallel_limit(runner: Runner) -> None:
    lock = threading.Lock()
    running = 0
    peak = 0
    two_at_once = threading.Event()
    failures: Counter[int] = Counter()

    def over(ctx: StepContext) -> list[int]:
        return list(range(24))

    @map_step(over=over, max_parallel=5, retry=Retry(max_attempts=2, initial_wait=0, max_wait=0))
    def square(ctx: ItemContext, item: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            if running >= 2:
                two_at_once.set()
        try:
            # Items in flight run together: each waits (briefly) to see a sibling running,
            # so the test does not depend on how the machine schedules threads.
            two_at_once.wait(timeout=2)
            time.sleep(0.01)
            if item % 7 == 0 and failures[item] == 0:
                failures[item] += 1
                raise ConnectionError("flaky")
            return item * item
        finally:
            with lock:
                running -= 1

    thread = runner.start(LongTask("sq", stages=[Stage("s", [square])]))
    assert runner.result(thread, "square") == [i * i for i in range(24)]
    assert 1 < peak <= 5
    retries = runner.events(thread, kinds=["step.retry"])
    assert sorted(e.data["item"] for e in retries) == [0, 7, 14, 21]


def test_graph_stays_the_size_of_the_definition(runner: Runner) -> None:
    small = contracts_task(Counter(), set())
    nodes = set(runner.graph(small).get_graph().nodes) - {"__start__", "__end__"}
    assert nodes == {"upload", "parse", "merge"}
    thread = runner.start(small, {"count": 60})
    assert len(runner.result(thread, "merge")) == 60


def test_bad_over_and_bad_policy() -> None:
    with pytest.raises(DefinitionError, match="max_parallel must be at least 1"):
        LongTask(
            "x",
            stages=[Stage("s", [map_step(lambda c, i: i, name="m", over=list, max_parallel=0)])],
        )


def test_over_must_return_a_list(runner: Runner) -> None:
    step = map_step(lambda c, i: i, name="m", over=lambda c: {"not": "a list"})
    with pytest.raises(StepFailed, match="must return a list of items, got dict"):
        runner.start(LongTask("x", stages=[Stage("s", [step])]))


def _stored_bytes(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        ckpt = conn.execute(
            "SELECT coalesce(sum(length(state) + length(metadata)), 0) FROM longtask_cp_checkpoints"
        ).fetchone()[0]
        values = conn.execute(
            "SELECT coalesce(sum(length(value)), 0) FROM longtask_cp_values"
        ).fetchone()[0]
        writes = conn.execute(
            "SELECT coalesce(sum(length(value)), 0) FROM longtask_cp_writes"
        ).fetchone()[0]
        ours = conn.execute(
            "SELECT coalesce(sum(length(result)), 0) FROM longtask_map_items"
        ).fetchone()[0]
        blobs = conn.execute("SELECT coalesce(sum(size), 0) FROM longtask_blobs").fetchone()[0]
    return int(ckpt + values + writes + ours + blobs)


def test_storage_per_item_stays_flat(tmp_path: Path) -> None:
    """Bytes per item must not grow with the number of items (no quadratic re-storing)."""

    def over(ctx: StepContext) -> list[int]:
        return list(range(ctx.inputs["n"]))

    @map_step(over=over, max_parallel=8)
    def payload(ctx: ItemContext, item: int) -> dict[str, Any]:
        return {"i": item, "text": f"{item:06d}" * 340}  # ~2 KB, different per item

    task = LongTask("store", stages=[Stage("s", [payload])])
    per_item = {}
    for n in (50, 400):
        path = tmp_path / f"{n}.db"
        with Runner(f"sqlite:///{path}") as r:
            r.start(task, {"n": n})
        per_item[n] = _stored_bytes(path) / n
    assert per_item[400] <= 1.2 * per_item[50], per_item


def test_a_new_item_starts_as_soon_as_one_finishes(runner: Runner) -> None:
    """A sliding window, not waves: with max_parallel=2, item 2 starts while item 0 (slow)
    is still in flight, as soon as item 1 (fast) is done."""
    log: list[str] = []
    lock = threading.Lock()
    item2_started = threading.Event()

    def note(what: str) -> None:
        with lock:
            log.append(what)

    @map_step(over=lambda ctx: [0, 1, 2, 3], max_parallel=2)
    def work(ctx: ItemContext, item: int) -> int:
        note(f"start {item}")
        if item == 2:
            item2_started.set()
        if item == 0:
            # In waves, item 2 could not start before this one finished: it would wait out
            # the timeout. With a window it starts when item 1 is done.
            item2_started.wait(timeout=10)
        note(f"finish {item}")
        return item * 10

    thread = runner.start(LongTask("window", stages=[Stage("s", [work])]))
    assert runner.result(thread, "work") == [0, 10, 20, 30]
    assert log.index("finish 1") < log.index("start 2") < log.index("finish 0"), log
    # never more than two in flight
    running = 0
    for entry in log:
        running += 1 if entry.startswith("start") else -1
        assert running <= 2, log


def test_a_slow_sibling_does_not_hold_back_the_map(runner: Runner) -> None:
    """A step beside the map in the same stage: the map runs all its items (more than one
    window's worth) and finishes while the sibling still runs."""
    total = 7
    lock = threading.Lock()
    finished = Counter[str]()
    all_items_done = threading.Event()
    seen_by_sibling: list[bool] = []

    @map_step(over=lambda ctx: list(range(total)), max_parallel=2)
    def fast(ctx: ItemContext, item: int) -> int:
        with lock:
            finished["items"] += 1
            if finished["items"] == total:
                all_items_done.set()
        return item + 1

    @function_step
    def slow(ctx: StepContext) -> str:
        # In waves, the map's second wave waits for this step's super-step to end: the
        # items could not all finish while it runs (it would wait out the timeout).
        seen_by_sibling.append(all_items_done.wait(timeout=10))
        return "slow done"

    @function_step
    def after(ctx: StepContext) -> int:
        return sum(ctx.result("fast"))

    task = LongTask("sibling", stages=[Stage("s", [fast, slow]), Stage("t", [after])])
    thread = runner.start(task)
    assert seen_by_sibling == [True]
    assert runner.result(thread, "after") == sum(range(1, total + 1))
    assert runner.result(thread, "slow") == "slow done"


def _cp_bytes(db_url: str, thread: str) -> int:
    """Bytes of one thread in the checkpoint tables (longtask_cp_*)."""
    queries = [
        "SELECT coalesce(sum(length(state) + length(metadata)), 0) FROM longtask_cp_checkpoints "
        "WHERE thread_id = {p}",
        "SELECT coalesce(sum(length(value)), 0) FROM longtask_cp_values WHERE thread_id = {p}",
        "SELECT coalesce(sum(length(value)), 0) FROM longtask_cp_writes WHERE thread_id = {p}",
    ]
    return sum(_scalar(db_url, q, (thread,)) for q in queries)


def _scalar(db_url: str, sql: str, params: tuple[Any, ...] = ()) -> int:
    if db_url.startswith("sqlite:///"):
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            return int(conn.execute(sql.format(p="?"), params).fetchone()[0])
    import psycopg

    with psycopg.connect(db_url, autocommit=True) as pg:
        row = pg.execute(sql.format(p="%s").replace("length(", "octet_length("), params).fetchone()  # type: ignore[arg-type]
        return int(row[0]) if row else 0


def test_item_results_are_stored_once_outside_the_checkpoint(runner: Runner, db_url: str) -> None:
    """The checkpoint holds a reference to the items table, not the item results: its bytes
    (and the blob table's) do not grow with the size of the results."""

    def over(ctx: StepContext) -> list[int]:
        return list(range(20))

    @map_step(over=over, max_parallel=4)
    def payload(ctx: ItemContext, item: int) -> dict[str, Any]:
        return {"i": item, "text": f"{item:04d}" * ctx.inputs["size"]}

    @function_step
    def count(ctx: StepContext) -> int:
        return len(ctx.result("payload"))

    task = LongTask("once", stages=[Stage("s", [payload]), Stage("t", [count])])
    blobs = "SELECT coalesce(sum(length(data)), 0) FROM longtask_blobs"
    outside: dict[int, int] = {}
    for size in (1, 2000):  # ~10 bytes and ~8 KB per item result
        before = _scalar(db_url, blobs)
        thread = runner.start(task, {"size": size}, thread_id=f"once-{size}")
        outside[size] = _cp_bytes(db_url, thread) + _scalar(db_url, blobs) - before
        assert runner.result(thread, "count") == 20
        result = runner.result(thread, "payload")
        assert [r["text"] for r in result] == [f"{i:04d}" * size for i in range(20)]
        assert runner.results(thread)["payload"] == result
    # 20 items x 8 KB = 160 KB of results, stored in longtask_map_items only
    assert outside[2000] < outside[1] + 2000, outside
    stored = _scalar(
        db_url,
        "SELECT coalesce(sum(length(result)), 0) FROM longtask_map_items WHERE thread_id = {p}",
        ("once-2000",),
    )
    assert stored >= 20 * 8000


def test_unknown_effects_in_items_pause_the_thread_one_item_at_a_time(runner: Runner) -> None:
    """Two items find an effect cut off mid-call (a ``started`` ledger row, as a crash leaves
    it): the other items finish, the thread waits for a person on the first, then, once
    that one is settled, on the second; each settled item goes on from its ledger row."""
    from longtask.steps._effects import args_digest, effect_key

    calls: list[int] = []

    def charge(amount: int) -> dict[str, int]:
        calls.append(amount)
        return {"charged": amount}

    @map_step(over=lambda ctx: [0, 1, 2, 3, 4], max_parallel=2)
    def bill(ctx: ItemContext, item: int) -> Any:
        return ctx.effect("charge", charge, item)

    task = LongTask("bill", stages=[Stage("s", [bill])])
    thread = "t-map-effects"
    keys = {}
    for i in (1, 3):
        keys[i] = effect_key(thread, "bill", "charge", args_digest("charge", (i,), {}), i)
        runner.db.store.effect_start(
            keys[i], thread, "bill", "charge", args_digest("charge", (i,), {})
        )
    runner.start(task, thread_id=thread)
    st = runner.status(thread)
    assert st.status == "waiting_user"
    assert [(w["kind"], w["key"]) for w in st.waiting] == [("effect", keys[1])]
    assert [p.request["item"] for p in runner.pending(thread, task=task)] == [1]
    assert sorted(calls) == [0, 2, 4]
    runner.resolve_effect(
        thread, keys[1], "succeeded", result={"charged": 1, "by": "hand"}, task=task
    )
    st = runner.status(thread)
    assert st.status == "waiting_user"
    assert [w["key"] for w in st.waiting] == [keys[3]]
    runner.resolve_effect(thread, keys[3], "retry", task=task)
    assert runner.status(thread).status == "completed"
    assert runner.result(thread, "bill") == [
        {"charged": 0},
        {"charged": 1, "by": "hand"},
        {"charged": 2},
        {"charged": 3},
        {"charged": 4},
    ]
    assert sorted(calls) == [0, 2, 3, 4]


def test_cancel_stops_the_map_before_its_next_item(db_url: str) -> None:
    started = Counter[int]()
    in_item_2 = threading.Event()

    @map_step(over=lambda ctx: list(range(6)), max_parallel=1)
    def slow(ctx: ItemContext, item: int) -> int:
        started[item] += 1
        if item == 2:
            in_item_2.set()
            deadline = time.monotonic() + 20
            while not ctx.cancel_requested and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)  # hold the thread past the other runner's lock attempt
        return item

    task = LongTask("cancel_map", stages=[Stage("s", [slow])])
    with Runner(db_url, cancel_poll=0.05) as runner:
        worker = threading.Thread(target=runner.start, args=(task,), kwargs={"thread_id": "t-c"})
        worker.start()
        assert in_item_2.wait(20)
        with Runner(db_url) as other:
            assert other.cancel("t-c", by="ops", task=task) is False  # the runner holds it
        worker.join(30)
        assert not worker.is_alive()
        assert runner.status("t-c").status == "cancelled"
    assert started == Counter({0: 1, 1: 1, 2: 1})


def test_a_permission_error_in_an_item_pauses_the_thread(runner: Runner) -> None:
    """An item denied access pauses the thread for a person (no new item starts, those in
    flight finish); `retry` runs only that item and the unfinished ones."""
    from longtask import PermissionDenied

    calls: Counter[int] = Counter()
    denied = {3}

    @map_step(over=lambda ctx: list(range(8)), max_parallel=1)
    def fetch(ctx: ItemContext, item: int) -> int:
        calls[item] += 1
        if item in denied:
            raise PermissionDenied(f"no access to document {item}")
        return item

    task = LongTask("perm", stages=[Stage("s", [fetch])])
    runner.start(task, thread_id="t-perm")
    st = runner.status("t-perm")
    assert st.status == "waiting_user"
    assert [(w["step"], w["kind"]) for w in st.waiting] == [("fetch", "permission")]
    assert calls == Counter({0: 1, 1: 1, 2: 1, 3: 1})
    denied.clear()
    runner.retry("t-perm", task=task)
    assert runner.result("t-perm", "fetch") == list(range(8))
    assert calls == Counter({**{i: 1 for i in range(8)}, 3: 2})


def test_item_timeout_fails_only_that_item(runner: Runner) -> None:
    release = threading.Event()

    @map_step(over=lambda ctx: [0, 1, 2, 3], max_parallel=2, timeout=0.5, on_item_error="collect")
    def wait(ctx: ItemContext, item: int) -> int:
        if item == 1:
            release.wait(timeout=30)  # never set while the step runs
        return item

    try:
        thread = runner.start(LongTask("timeouts", stages=[Stage("s", [wait])]))
    finally:
        release.set()
    result = runner.result(thread, "wait")
    assert result["results"] == [0, 2, 3]
    assert [(e["index"], e["type"]) for e in result["errors"]] == [(1, "StepTimeout")]
