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
    # Waves one and two finished; in the third, LangGraph may cancel siblings that had not
    # started when item 9 failed. Nothing past the third wave ran.
    assert {i: calls[i] for i in range(8)} == {i: 1 for i in range(8)}
    assert calls[9] == 1 and max(calls) <= 11 and max(calls.values()) == 1
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
            # Items of a wave run together: each waits (briefly) to see a sibling running,
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
    assert nodes == {"upload", "parse.map", "parse.item", "parse", "merge"}
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
