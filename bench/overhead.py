#!/usr/bin/env python
"""Overhead of longtask over a hand-written LangGraph graph of the same shape.

    python bench/overhead.py                      # full run, SQLite and PostgreSQL
    python bench/overhead.py --quick              # smoke run (small sizes)
    python bench/overhead.py --backend sqlite     # one backend
    python bench/overhead.py --pg postgresql://root@127.0.0.1:5432/test
    python bench/overhead.py --parts time --reps 21   # only the timings, more runs

Four parts, all in one run; longtask runs on its own saver, raw LangGraph on
``SqliteSaver`` / ``PostgresSaver``:

1. Time: median per-step wall time (and client CPU) of ``Runner.start`` against
   ``graph.stream`` of a raw ``StateGraph`` with the same nodes, edges, per-node result
   channels and ``durability="sync"``, for a linear task (200 stages of one step) and a wide
   one (20 stages of 8 parallel steps). Per-step time = wall time of one run / steps.
2. Where the time goes: SQL statements per step (by table) and time spent in the savers and
   longtask's store, from one extra, instrumented run of each (not part of the timings).
3. Storage: bytes a thread stores per step for linear and wide tasks with ~2 KB step
   results at 50 to 2,000 steps, how often one step's result is stored, and the growth
   exponent k of bytes ~ steps^k (least squares on log-log).
4. Reads on a 2,000-step thread: status, history(limit=20), a resume of one step, and
   compiling a 1,600-step task, against LangGraph's equivalents.

The targets of issue 14 are printed beside the figures. This is a benchmark, not a test: it
never fails on a target. Each measurement gets a fresh SQLite file or a fresh PostgreSQL
database (created through the admin URL ``--pg`` / ``$LONGTASK_BENCH_PG`` and dropped
afterwards).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import math
import shutil
import sqlite3
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypedDict

import psycopg
from _common import (
    MARKER_STEP,
    PAYLOAD_CHARS,
    Backend,
    ResultFn,
    Storage,
    add_common_args,
    backends_of,
    human,
    ms,
    payload_maker,
    print_footer,
    print_header,
    table,
    timed,
)
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from longtask import LongTask, Runner, Stage, function_step, wait_for
from longtask.steps import INPUTS_CHANNEL, result_channel

# --------------------------------------------------------------------------------------------
# Shapes and step results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    kind: str  # "linear" or "wide"
    stages: int
    width: int

    @property
    def steps(self) -> int:
        return self.stages * self.width

    @property
    def label(self) -> str:
        if self.width == 1:
            return f"linear {self.stages}x1"
        return f"wide {self.stages}x{self.width}"

    def layers(self) -> list[list[str]]:
        """Step names, stage by stage (every step of a layer joins into every step of the
        next, exactly as longtask's stage barrier)."""
        if self.width == 1:
            digits = len(str(self.stages - 1))
            return [[f"s{i:0{digits}d}"] for i in range(self.stages)]
        return [[f"s{j:02d}_{k}" for k in range(self.width)] for j in range(self.stages)]


def timed_cpu(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of ``fn()``, after a garbage collection."""
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def trivial_result(i: int) -> dict[str, Any]:
    return {"i": i, "ok": True}


def build_longtask(shape: Shape, result: ResultFn, name: str) -> LongTask:
    stages = []
    i = 0
    for j, layer in enumerate(shape.layers()):
        steps = []
        for step_name in layer:
            steps.append(function_step(_lt_fn(result, i), name=step_name))
            i += 1
        stages.append(Stage(f"stage{j:04d}", steps))
    return LongTask(name=name, version="1", stages=stages)


def _lt_fn(result: ResultFn, i: int) -> Callable[[Any], dict[str, Any]]:
    def fn(ctx: Any) -> dict[str, Any]:
        return result(i)

    return fn


def build_raw(shape: Shape, result: ResultFn, saver: BaseCheckpointSaver[Any]) -> Any:
    """The same graph by hand: one node per step, one channel per node, join edges."""
    layers = shape.layers()
    fields: dict[str, Any] = {INPUTS_CHANNEL: dict[str, Any]}
    for layer in layers:
        for name in layer:
            fields[result_channel(name)] = dict[str, Any]
    schema = TypedDict("RawState", fields, total=False)  # type: ignore[operator]
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(schema)
    i = 0
    previous: list[str] = []
    for layer in layers:
        for name in layer:
            graph.add_node(name, _raw_node(result_channel(name), result, i))
            i += 1
            if not previous:
                graph.add_edge(START, name)
            elif len(previous) == 1:
                graph.add_edge(previous[0], name)
            else:
                graph.add_edge(previous, name)
        previous = layer
    for name in previous:
        graph.add_edge(name, END)
    return graph.compile(checkpointer=saver)


def _raw_node(channel: str, result: ResultFn, i: int) -> Callable[[Any], dict[str, Any]]:
    def node(state: Any) -> dict[str, Any]:
        return {channel: result(i)}

    return node


def raw_config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def run_raw_graph(graph: Any, thread_id: str, width: int = 1) -> None:
    """Run the raw graph to the end, driven the way longtask's Runner drives its graph:
    ``stream_mode="updates"`` (``invoke`` would also read every channel after each step) and
    ``max_concurrency`` = the widest stage, at least 4 (LangGraph's default thread pool is
    cores + 4 = 6 threads here, fewer than a stage of 8)."""
    config = {**raw_config(thread_id), "max_concurrency": max(4, min(64, width))}
    for _ in graph.stream({INPUTS_CHANNEL: {}}, config, durability="sync", stream_mode="updates"):
        pass


# --------------------------------------------------------------------------------------------
# Part 1: time per step
# --------------------------------------------------------------------------------------------


@dataclass
class Timing:
    backend: str
    shape: Shape
    lt: list[float]  # seconds per step, one per repetition
    raw: list[float]
    lt_cpu: list[float]  # this process's CPU seconds per step (all its threads)
    raw_cpu: list[float]
    #: the same raw graph on LangGraph's InMemorySaver (no database at all): what
    #: LangGraph's own loop costs per step, the floor any saver's figures stand on
    floor: list[float]

    @property
    def floor_ratio(self) -> float:
        """The floor as a ratio to raw: the best ratio a saver could reach."""
        return statistics.median(self.floor) / self.raw_median

    @property
    def lt_median(self) -> float:
        return statistics.median(self.lt)

    @property
    def raw_median(self) -> float:
        return statistics.median(self.raw)

    @property
    def ratio(self) -> float:
        return self.lt_median / self.raw_median

    @property
    def paired_ratio(self) -> float:
        """Median of lt/raw over the repetitions (each pair ran back to back), which is
        less sensitive to slow drift of the machine than the ratio of the medians."""
        return statistics.median(a / b for a, b in zip(self.lt, self.raw, strict=True))


def check_lt(runner: Runner, thread_id: str, steps: int) -> None:
    """Sanity (not timing): the thread completed every step."""
    status = runner.status(thread_id)
    done = sum(s.state == "completed" for s in status.steps)
    if status.status != "completed" or done != steps:
        raise RuntimeError(f"longtask thread {thread_id}: {status.status}, {done}/{steps} steps")


def check_raw(graph: Any, thread_id: str, steps: int) -> None:
    snap = graph.get_state(raw_config(thread_id))
    done = sum(1 for k in snap.values if k.startswith("out."))
    if snap.next or done != steps:
        raise RuntimeError(f"raw thread {thread_id}: next={snap.next}, {done}/{steps} steps")


def time_shape(backend: Backend, shape: Shape, reps: int) -> Timing:
    with backend.fresh("time_lt") as lt_env, backend.fresh("time_raw") as raw_env:
        runner = lt_env.runner()
        task = build_longtask(shape, trivial_result, f"bench_{shape.kind}")
        graph = build_raw(shape, trivial_result, raw_env.raw_saver())
        in_memory = build_raw(shape, trivial_result, InMemorySaver())
        counter = iter(range(10**6))

        def run_lt() -> str:
            tid = f"lt-{shape.kind}-{next(counter)}"
            runner.start(task, {}, thread_id=tid)
            return tid

        def run_raw() -> str:
            tid = f"raw-{shape.kind}-{next(counter)}"
            run_raw_graph(graph, tid, shape.width)
            return tid

        def run_floor() -> str:
            tid = f"floor-{shape.kind}-{next(counter)}"
            run_raw_graph(in_memory, tid, shape.width)
            return tid

        # Warm-up (imports, compiled graphs, pool connections, caches): not timed.
        check_lt(runner, run_lt(), shape.steps)
        check_raw(graph, run_raw(), shape.steps)
        check_raw(in_memory, run_floor(), shape.steps)
        lt: list[float] = []
        raw: list[float] = []
        floor: list[float] = []
        lt_cpu: list[float] = []
        raw_cpu: list[float] = []
        floor_cpu: list[float] = []
        for rep in range(reps):
            # Alternate the order so that drift (caches, autovacuum, file growth) hits all.
            runs = [(run_lt, lt, lt_cpu), (run_raw, raw, raw_cpu), (run_floor, floor, floor_cpu)]
            for fn, out, cpu in runs if rep % 2 == 0 else reversed(runs):
                wall, used = timed_cpu(fn)
                out.append(wall / shape.steps)
                cpu.append(used / shape.steps)
        return Timing(backend.name, shape, lt, raw, lt_cpu, raw_cpu, floor)


# --------------------------------------------------------------------------------------------
# Part 2: where the time goes (one extra, instrumented run each)
# --------------------------------------------------------------------------------------------


def _category(sql: str) -> str:
    s = " ".join(sql.split()).lower()
    for needle, cat in (
        # PostgreSQL: a checkpoint's whole transaction in one statement (the lease check,
        # events and their NOTIFY, writes, values, the checkpoint row)
        ("longtask_cp_write(", "cp_tx"),
        ("into longtask_cp_checkpoints", "checkpoints"),
        ("into longtask_cp_values", "cp_values"),
        ("into longtask_cp_writes", "cp_writes"),
        ("longtask_cp_", "cp_read"),
        ("longtask_fence_check", "fence"),
        ("longtask_leases", "fence"),
        ("pg_notify", "notify"),
        ("longtask_events", "events"),
        ("longtask_blobs", "lt_blobs"),
        ("longtask_threads", "lt_threads"),
        ("advisory", "lock"),
        ("checkpoint_blobs", "cp_values"),
        ("checkpoint_writes", "cp_writes"),
        ("into writes", "cp_writes"),
        ("from writes", "cp_read"),
        ("into checkpoints", "checkpoints"),
        ("from checkpoints", "cp_read"),
    ):
        if needle in s:
            return cat
    if s.startswith(("begin", "commit", "rollback", "savepoint", "release")):
        return "tx"
    return "other"


@dataclass
class Profile:
    backend: str
    shape: Shape
    lt_statements: Counter[str]
    raw_statements: Counter[str]
    # Wall time of the instrumented run and, inside it, time spent in the saver's methods
    # (put, put_writes, flush_events, get_tuple: serialisation and the database round trips),
    # in the saver's database transactions alone (longtask: ``backend.write``) and in
    # longtask's store (``Store._run``: thread record, blobs, status reads).
    lt_seconds: float
    lt_saver: float
    lt_saver_db: float
    lt_store: float
    raw_seconds: float
    raw_saver: float


class _PgCounter:
    """Counts psycopg statements (Cursor.execute / executemany) while active."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    @contextlib.contextmanager
    def active(self) -> Iterator[Counter[str]]:
        cls = psycopg.Cursor
        orig_execute, orig_many = cls.execute, cls.executemany
        counts = self.counts

        def execute(cur: Any, query: Any, *a: Any, **kw: Any) -> Any:
            counts[_category(str(query))] += 1
            return orig_execute(cur, query, *a, **kw)

        def executemany(cur: Any, query: Any, *a: Any, **kw: Any) -> Any:
            counts[_category(str(query))] += 1
            return orig_many(cur, query, *a, **kw)

        cls.execute, cls.executemany = execute, executemany  # type: ignore[method-assign]
        try:
            yield counts
        finally:
            cls.execute, cls.executemany = orig_execute, orig_many  # type: ignore[method-assign]


def _sqlite_trace(conns: list[sqlite3.Connection], counts: Counter[str] | None) -> None:
    """Count every statement SQLite runs on ``conns`` into ``counts`` (None: stop)."""

    def trace(sql: str) -> None:
        assert counts is not None
        counts[_category(sql)] += 1

    for conn in conns:
        conn.set_trace_callback(trace if counts is not None else None)


class _Clock:
    """Adds up the wall time of calls to methods wrapped on an instance (their instance
    attribute shadows the class's method; ``undo`` deletes it)."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self._undo: list[tuple[Any, str]] = []

    def wrap(self, obj: Any, name: str, bucket: str) -> None:
        orig = getattr(obj, name)
        seconds = self.seconds

        def timed_call(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return orig(*a, **kw)
            finally:
                seconds[bucket] += time.perf_counter() - t0

        setattr(obj, name, timed_call)
        self._undo.append((obj, name))

    def undo(self) -> None:
        for obj, name in reversed(self._undo):
            delattr(obj, name)
        self._undo.clear()


_SAVER_METHODS = ("put", "put_writes", "get_tuple", "flush_events")


def profile_shape(backend: Backend, shape: Shape) -> Profile:
    with backend.fresh("prof_lt") as lt_env, backend.fresh("prof_raw") as raw_env:
        runner = lt_env.runner()
        task = build_longtask(shape, trivial_result, f"bench_{shape.kind}")
        saver = raw_env.raw_saver()
        graph = build_raw(shape, trivial_result, saver)
        # warm-up, not counted
        runner.start(task, {}, thread_id="warm-lt")
        run_raw_graph(graph, "warm-raw", shape.width)

        # Instrumentation for the benchmark only: private attributes of the saver and store.
        db: Any = runner.db
        lt_saver: Any = db.saver
        clock = _Clock()
        for name in _SAVER_METHODS:
            clock.wrap(lt_saver, name, "saver")
        clock.wrap(lt_saver.backend, "write", "saver_db")
        clock.wrap(db.store, "_run", "store")
        raw_clock = _Clock()
        for name in _SAVER_METHODS[:3]:
            raw_clock.wrap(saver, name, "saver")

        lt_counts: Counter[str] = Counter()
        raw_counts: Counter[str] = Counter()
        if backend.name == "sqlite":
            _sqlite_trace([db._conn], lt_counts)
            lt_seconds = timed(lambda: runner.start(task, {}, thread_id="prof-lt"))
            _sqlite_trace([db._conn], None)
            _sqlite_trace([saver.conn], raw_counts)  # type: ignore[attr-defined]
            raw_seconds = timed(lambda: run_raw_graph(graph, "prof-raw", shape.width))
            _sqlite_trace([saver.conn], None)  # type: ignore[attr-defined]
        else:
            pg = _PgCounter()
            with pg.active():
                lt_seconds = timed(lambda: runner.start(task, {}, thread_id="prof-lt"))
            lt_counts = pg.counts
            pg = _PgCounter()
            with pg.active():
                raw_seconds = timed(lambda: run_raw_graph(graph, "prof-raw", shape.width))
            raw_counts = pg.counts
        clock.undo()
        raw_clock.undo()
        return Profile(
            backend.name,
            shape,
            lt_counts,
            raw_counts,
            lt_seconds,
            clock.seconds["saver"],
            clock.seconds["saver_db"],
            clock.seconds["store"],
            raw_seconds,
            raw_clock.seconds["saver"],
        )


# --------------------------------------------------------------------------------------------
# Part 3: storage
# --------------------------------------------------------------------------------------------


@dataclass
class StorageRun:
    backend: str
    impl: str  # "longtask" or "raw"
    shape: Shape
    storage: Storage
    seconds: float

    @property
    def steps(self) -> int:
        return self.shape.steps


def storage_shape(kind: str, steps: int) -> Shape:
    return Shape("linear", steps, 1) if kind == "linear" else Shape("wide", steps // 8, 8)


def storage_run(backend: Backend, impl: str, shape: Shape) -> StorageRun:
    tag = uuid.uuid4().hex[:10]
    result, marker = payload_maker(tag)
    steps = shape.steps
    with backend.fresh(f"store_{impl}_{shape.kind}_{steps}") as env:
        if impl == "longtask":
            runner = env.runner()
            task = build_longtask(shape, result, f"bench_storage_{steps}")
            runner.graph(task)  # compile outside the timing, as build_raw does for raw
            tid = f"lt-storage-{steps}"
            seconds = timed(lambda: runner.start(task, {}, thread_id=tid))
            check_lt(runner, tid, steps)
        else:
            graph = build_raw(shape, result, env.raw_saver())
            tid = f"raw-storage-{steps}"
            seconds = timed(lambda: run_raw_graph(graph, tid, shape.width))
            check_raw(graph, tid, steps)
        return StorageRun(backend.name, impl, shape, env.storage(tid, marker), seconds)


def fitted_exponent(points: list[tuple[int, int]]) -> float | None:
    """k of bytes ~ steps^k: the least-squares slope of log(bytes) on log(steps)."""
    if len(points) < 2:
        return None
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(b) for _, b in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def time_target(backend: str, shape: Shape, t: Timing | None = None) -> str:
    """The issue's target for this case, and whether this run met it."""
    if shape.kind != "linear":
        return "-"
    if backend == "postgres":
        text = "<= 1.00 ms and <= 0.60x"
        met = t is not None and t.lt_median <= 0.001 and t.ratio <= 0.6
    else:
        text = "<= 0.80x"
        met = t is not None and t.ratio <= 0.8
    return f"{text}: {'met' if met else 'missed'}" if t is not None else text


def print_timings(timings: list[Timing], reps: int) -> None:
    print(f"\n## 1. Time per step (median of {reps} runs; ms per step = run wall time / steps)\n")
    rows = []
    for t in timings:
        rows.append(
            [
                t.backend,
                t.shape.label,
                str(t.shape.steps),
                ms(t.lt_median),
                ms(t.raw_median),
                f"{t.ratio:.2f}",
                f"{t.paired_ratio:.2f}",
                ms(t.lt_median - t.raw_median),
                f"{ms(min(t.lt))}-{ms(max(t.lt))}",
                f"{ms(min(t.raw))}-{ms(max(t.raw))}",
                ms(statistics.median(t.lt_cpu)),
                ms(statistics.median(t.raw_cpu)),
                ms(statistics.median(t.floor)),
                f"{t.floor_ratio:.2f}",
                time_target(t.backend, t.shape, t),
            ]
        )
    print(
        table(
            [
                "backend",
                "shape",
                "steps",
                "longtask ms",
                "raw ms",
                "ratio",
                "paired",
                "extra ms",
                "longtask range",
                "raw range",
                "lt CPU",
                "raw CPU",
                "floor ms",
                "floor/raw",
                "target (longtask ms, ratio)",
            ],
            rows,
        )
    )
    print(
        "\n(ratio = longtask median / raw median; paired = median of the per-repetition "
        "ratios; lt CPU / raw CPU = median CPU time of this process (all its threads: the "
        "client side only, not the database server's) per step, which depends less on the "
        "machine's load than the wall time. Targets from the issue, for the linear chain: "
        "PostgreSQL <= 1.0 ms/step and <= 0.6x raw LangGraph + PostgresSaver, SQLite <= 0.8x "
        "raw LangGraph + SqliteSaver. floor = the raw graph on LangGraph's InMemorySaver (no "
        "database, nothing durable): what LangGraph's own loop costs per step; floor/raw is the "
        "best ratio any saver could reach, and a target below it cannot be met.)"
    )


def print_profiles(profiles: list[Profile], timings: list[Timing]) -> None:
    print("\n## 2. Where the time goes (one instrumented run each; statements per step)\n")
    cats = [
        "cp_tx",
        "checkpoints",
        "cp_values",
        "cp_writes",
        "cp_read",
        "fence",
        "events",
        "notify",
        "lt_threads",
        "lt_blobs",
        "lock",
        "tx",
        "other",
    ]
    rows = []
    for p in profiles:
        n = p.shape.steps
        for impl, counts in (("longtask", p.lt_statements), ("raw", p.raw_statements)):
            total = sum(counts.values())
            row = [p.backend, p.shape.label, impl, f"{total / n:.2f}"]
            row += [f"{counts.get(c, 0) / n:.2f}" for c in cats]
            rows.append(row)
    print(table(["backend", "shape", "impl", "total", *cats], rows))
    print()
    rows = []
    for p in profiles:
        n = p.shape.steps
        rows.append(
            [
                p.backend,
                p.shape.label,
                ms(p.lt_seconds / n),
                ms(p.lt_saver / n),
                ms(p.lt_saver_db / n),
                ms((p.lt_saver - p.lt_saver_db) / n),
                ms(p.lt_store / n),
                ms(p.raw_seconds / n),
                ms(p.raw_saver / n),
            ]
        )
    print(
        table(
            [
                "backend",
                "shape",
                "lt ms/step",
                "lt saver",
                "lt saver tx",
                "lt saver rest",
                "lt store",
                "raw ms/step",
                "raw saver",
            ],
            rows,
        )
    )
    print(
        "\n(Statements: counted with SQLite's trace callback and by wrapping psycopg's "
        "Cursor.execute/executemany, which also counts the statements queued in a pipeline; "
        "an executemany counts once. cp_tx is longtask's checkpoint transaction on PostgreSQL, "
        "one statement (longtask_cp_write: the lease check, events and NOTIFY, writes, values "
        "and the checkpoint row). checkpoints/cp_values/cp_writes are the savers' inserts "
        "(longtask_cp_* or LangGraph's tables), cp_read their reads, fence the lease check "
        "inside each checkpoint transaction, events and notify the event rows and the "
        "NOTIFY committed with them, tx SQLite's BEGIN/COMMIT. Times, ms per step of the "
        "instrumented run: saver = inside the saver's put, put_writes, get_tuple and "
        "flush_events (serialisation plus the database); saver tx = inside longtask's "
        "transactions (backend.write: the round trips and the commit); saver rest = saver - "
        "saver tx (encoding, deltas); store = longtask's other SQL (Store._run: thread record, "
        "blobs, status). These are wall times summed over the threads that made the calls: "
        "LangGraph stores a task's writes from a background thread while its loop goes on, "
        "so they overlap each other and the rest (the sum can exceed the run's wall time), "
        "and the instrumented runs are slower than part 1's.)"
    )


STORAGE_K_TARGET = 1.1
STORAGE_STEP_TARGET = 3000  # bytes per trivial step, besides its result


def result_bytes() -> int:
    """The size of one step's result as JSON (the ~2 KB payload)."""
    result, _ = payload_maker("size")
    return len(json.dumps(result(0), separators=(",", ":")))


def print_storage(runs: list[StorageRun]) -> None:
    per_step_target = STORAGE_STEP_TARGET + result_bytes()
    print(
        f"\n## 3. Storage per thread: ~{PAYLOAD_CHARS // 1000} KB results "
        "(logical bytes; fresh database each)\n"
    )
    rows = []
    for r in runs:
        s = r.storage
        copies = sum(s.marker.values())
        where = ", ".join(f"{k} {v}" for k, v in sorted(s.marker.items()) if v)
        lt = r.impl == "longtask"
        per_step = s.total / r.steps
        rows.append(
            [
                r.backend,
                r.shape.kind,
                r.impl,
                str(r.steps),
                human(s.total),
                f"{per_step:,.0f}",
                ("met" if per_step <= per_step_target else "missed") if lt else "-",
                f"{human(s.checkpoints)} / {s.checkpoint_rows}",
                human(s.values) if lt or r.backend == "postgres" else "-",
                human(s.writes),
                human(s.lt_blobs) if lt else "-",
                f"{human(s.events)} / {s.event_rows}" if lt else "-",
                f"{copies} ({where})" if copies else "0",
                ms(r.seconds / r.steps),
            ]
        )
    print(
        table(
            [
                "backend",
                "shape",
                "impl",
                "steps",
                "total",
                "bytes/step",
                f"<= {per_step_target:,} B/step",
                "checkpoints / rows",
                "values",
                "writes",
                "lt_blobs",
                "events / rows",
                f"copies of step {MARKER_STEP}'s result",
                "ms/step",
            ],
            rows,
        )
    )
    print(
        f"\n(Target: <= {STORAGE_STEP_TARGET:,} bytes per trivial step plus its result "
        f"({result_bytes():,} bytes of JSON here), for longtask. total includes longtask's "
        "events.)"
    )
    print(
        "\nGrowth exponent k in total ~ steps^k (1 = linear, 2 = quadratic): between "
        f"consecutive sizes, and fitted by least squares on log-log over all sizes "
        f"(target for longtask: k <= {STORAGE_K_TARGET}):\n"
    )
    rows = []
    keyed = {(r.backend, r.shape.kind, r.impl, r.steps): r.storage.total for r in runs}
    combos = dict.fromkeys((r.backend, r.shape.kind) for r in runs)
    pair_labels: list[str] = []
    for backend, kind in combos:
        sizes = sorted({r.steps for r in runs if (r.backend, r.shape.kind) == (backend, kind)})
        pairs = list(itertools.pairwise(sizes))
        pair_labels = pair_labels if len(pair_labels) >= len(pairs) else [""] * len(pairs)
        for impl in ("longtask", "raw"):
            points = [
                (n, keyed[(backend, kind, impl, n)])
                for n in sizes
                if keyed.get((backend, kind, impl, n))
            ]
            k = fitted_exponent(points)
            steps_k = []
            for a, b in pairs:
                ta, tb = keyed.get((backend, kind, impl, a)), keyed.get((backend, kind, impl, b))
                steps_k.append(
                    f"{a}->{b}: {math.log(tb / ta) / math.log(b / a):.2f}" if ta and tb else "-"
                )
            ratio = "-"
            if impl == "longtask" and sizes:
                n = sizes[-1]
                lt_total, raw_total = (
                    keyed.get((backend, kind, "longtask", n)),
                    keyed.get((backend, kind, "raw", n)),
                )
                if lt_total and raw_total:
                    ratio = f"{raw_total / lt_total:.1f}x @{n}"
            rows.append(
                [
                    backend,
                    kind,
                    impl,
                    ", ".join(steps_k),
                    f"{k:.2f}" if k is not None else "-",
                    (
                        ("met" if k <= STORAGE_K_TARGET else "missed")
                        if impl == "longtask" and k is not None
                        else "-"
                    ),
                    ratio,
                ]
            )
    print(
        table(
            [
                "backend",
                "shape",
                "impl",
                "k between sizes",
                "k fitted",
                f"k <= {STORAGE_K_TARGET}",
                "raw/longtask bytes",
            ],
            rows,
        )
    )


# --------------------------------------------------------------------------------------------
# Part 4: reads on a long thread
# --------------------------------------------------------------------------------------------

READ_TARGETS = {
    "status": ("Runner.status", "get_state", 0.010),
    "status_lean": ("Runner.status(usage=False)", "get_state", 0.010),
    "status_cold": ("Runner.status, new Runner", "get_state, new saver", 0.010),
    "history": ("Runner.history(limit=20)", "get_state_history(limit=20)", 0.020),
    "resume": ("signal + run one step", "Command(resume) + one step", 0.020),
    "compile": ("Runner.graph(task), first call", "StateGraph + compile", 0.200),
}


@dataclass
class Reads:
    backend: str
    steps: int
    compile_steps: int
    lt: dict[str, list[float]]
    raw: dict[str, list[float]]
    setup: dict[str, float]
    lt_cpu: dict[str, list[float]]
    raw_cpu: dict[str, list[float]]
    #: the raw graph on LangGraph's InMemorySaver: LangGraph's own cost of the same read
    floor: dict[str, list[float]]


def _wait_name(r: int) -> str:
    return f"go{r}"


def build_reads_longtask(steps: int, result: ResultFn, waits: int) -> LongTask:
    """``steps`` function steps, then ``waits`` times: a wait for an outside event and one
    step after it."""
    base = build_longtask(Shape("linear", steps, 1), result, "bench_reads")
    stages = list(base.stages)
    for r in range(waits):
        stages.append(Stage(f"wait{r}", [wait_for(_wait_name(r))]))
        stages.append(Stage(f"after{r}", [function_step(_lt_fn(result, steps + r), name=f"a{r}")]))
    return LongTask(name="bench_reads", version="1", stages=stages)


def build_reads_raw(
    steps: int, result: ResultFn, waits: int, saver: BaseCheckpointSaver[Any]
) -> Any:
    """The same by hand: a chain of ``steps`` nodes, then ``waits`` pairs of an
    ``interrupt()`` node and a node."""
    names = [f"s{i:04d}" for i in range(steps)]
    tail: list[tuple[str, Any]] = []
    for r in range(waits):
        tail.append((f"w{r}", _raw_wait(result_channel(f"w{r}"))))
        tail.append((f"a{r}", _raw_node(result_channel(f"a{r}"), result, steps + r)))
    fields: dict[str, Any] = {INPUTS_CHANNEL: dict[str, Any]}
    for name in [*names, *(n for n, _ in tail)]:
        fields[result_channel(name)] = Any
    schema = TypedDict("RawReads", fields, total=False)  # type: ignore[operator]
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(schema)
    previous = START
    for i, name in enumerate(names):
        graph.add_node(name, _raw_node(result_channel(name), result, i))
        graph.add_edge(previous, name)
        previous = name
    for name, node in tail:
        graph.add_node(name, node)
        graph.add_edge(previous, name)
        previous = name
    graph.add_edge(previous, END)
    return graph.compile(checkpointer=saver)


def _raw_wait(channel: str) -> Callable[[Any], dict[str, Any]]:
    def node(state: Any) -> dict[str, Any]:
        return {channel: interrupt("waiting")}

    return node


def reads_run(backend: Backend, steps: int, compile_steps: int, reps: int) -> Reads:
    """A thread of ``steps`` trivial steps with ~2 KB results, paused at a wait, on each
    side; then each read ``reps`` times (after one untimed call), and ``reps`` resumes
    of one step each; and compiling a task of ``compile_steps`` steps."""
    tag = uuid.uuid4().hex[:10]
    result, _ = payload_maker(tag)
    waits = reps + 1
    lt: dict[str, list[float]] = {}
    raw: dict[str, list[float]] = {}
    setup: dict[str, float] = {}
    with backend.fresh("reads_lt") as lt_env, backend.fresh("reads_raw") as raw_env:
        runner = lt_env.runner()
        task = build_reads_longtask(steps, result, waits)
        runner.graph(task)
        tid = "reads"
        setup["longtask"] = timed(lambda: runner.start(task, {}, thread_id=tid))
        if runner.status(tid).status != "waiting_external":
            raise RuntimeError(f"longtask reads thread: {runner.status(tid).status}")
        saver = raw_env.raw_saver()
        graph = build_reads_raw(steps, result, waits, saver)
        config = raw_config("reads")

        def raw_stream(value: Any, on: Any = graph) -> None:
            for _ in on.stream(value, config, durability="sync", stream_mode="updates"):
                pass

        setup["raw"] = timed(lambda: raw_stream({INPUTS_CHANNEL: {}}))
        if graph.get_state(config).next != ("w0",):
            raise RuntimeError(f"raw reads thread: next={graph.get_state(config).next}")
        # The floor: the same raw graph with nothing durable (LangGraph's in-memory saver).
        in_memory = build_reads_raw(steps, result, waits, InMemorySaver())
        raw_stream({INPUTS_CHANNEL: {}}, in_memory)
        floor: dict[str, list[float]] = {}

        def floor_of(key: str, fn: Callable[[], Any]) -> None:
            fn()
            floor[key] = [timed_cpu(fn)[0] for _ in range(reps)]

        lt_cpu: dict[str, list[float]] = {}
        raw_cpu: dict[str, list[float]] = {}

        def measure(
            fn: Callable[[], Any], cpu: list[float], before: Callable[[], Any] | None = None
        ) -> list[float]:
            fn()  # warm-up (pool connections, caches): not timed
            out = []
            for _ in range(reps):
                arg = before() if before else None
                wall, used = timed_cpu(lambda: fn(arg) if before else fn())  # noqa: B023
                out.append(wall)
                cpu.append(used)
            return out

        def both(
            key: str, lt_fn: Any, raw_fn: Any, lt_before: Any = None, raw_before: Any = None
        ) -> None:
            lt[key] = measure(lt_fn, lt_cpu.setdefault(key, []), lt_before)
            raw[key] = measure(raw_fn, raw_cpu.setdefault(key, []), raw_before)

        both("status", lambda: runner.status(tid), lambda: graph.get_state(config))
        floor_of("status", lambda: in_memory.get_state(config))
        # without the per-step usage rows (what `watch` polls with)
        both(
            "status_lean", lambda: runner.status(tid, usage=False), lambda: graph.get_state(config)
        )
        floor["status_lean"] = floor["status"]
        # A new process would start cold: a new Runner (and a new raw saver) per read;
        # opening them is not timed.
        both(
            "status_cold",
            lambda r=None: (r or runner).status(tid),
            lambda g=None: (g or graph).get_state(config),
            lt_env.runner,
            lambda: build_reads_raw(steps, result, waits, raw_env.raw_saver()),
        )
        both(
            "history",
            lambda: runner.history(tid, 20),
            lambda: list(graph.get_state_history(config, limit=20)),
        )
        floor_of("history", lambda: list(in_memory.get_state_history(config, limit=20)))
        lt_waits = iter(range(waits))
        raw_waits = iter(range(waits))
        both(
            "resume",
            lambda: runner.signal(tid, _wait_name(next(lt_waits)), {"ok": True}, task=task),
            lambda: (next(raw_waits), raw_stream(Command(resume={"ok": True}))),
        )
        floor_of("resume", lambda: raw_stream(Command(resume={"ok": True}), in_memory))
        done = sum(s.state == "completed" for s in runner.status(tid).steps)
        if done != steps + 2 * waits:
            raise RuntimeError(f"longtask reads thread: {done} steps completed")

        shape = Shape("linear", compile_steps, 1)
        for key in ("compile",):
            lt[key], raw[key], lt_cpu[key], raw_cpu[key] = [], [], [], []
        for _ in range(reps):
            fresh = build_longtask(shape, trivial_result, "bench_compile")
            for side, side_cpu, fn in (
                (lt, lt_cpu, lambda: runner.graph(fresh)),  # noqa: B023
                (raw, raw_cpu, lambda: build_raw(shape, trivial_result, saver)),
            ):
                wall, used = timed_cpu(fn)
                side["compile"].append(wall)
                side_cpu["compile"].append(used)
    return Reads(backend.name, steps, compile_steps, lt, raw, setup, lt_cpu, raw_cpu, floor)


def print_reads(reads: list[Reads], reps: int) -> None:
    print(
        "\n## 4. Reads on a long thread, resume, compile "
        f"(median of {reps}; ms; same run, raw LangGraph beside)\n"
    )
    rows = []
    for r in reads:
        for key, (lt_label, raw_label, target) in READ_TARGETS.items():
            lt_t, raw_t = statistics.median(r.lt[key]), statistics.median(r.raw[key])
            size = r.compile_steps if key == "compile" else r.steps
            rows.append(
                [
                    r.backend,
                    str(size),
                    lt_label,
                    ms(lt_t),
                    f"{ms(min(r.lt[key]))}-{ms(max(r.lt[key]))}",
                    raw_label,
                    ms(raw_t),
                    f"{lt_t / raw_t:.2f}",
                    ms(statistics.median(r.lt_cpu[key])),
                    ms(statistics.median(r.raw_cpu[key])),
                    ms(statistics.median(r.floor[key])) if key in r.floor else "-",
                    f"<= {target * 1000:.0f}: {'met' if lt_t <= target else 'missed'}"
                    if r.backend == "postgres"
                    else "-",
                ]
            )
    print(
        table(
            [
                "backend",
                "steps",
                "longtask",
                "ms",
                "range",
                "raw LangGraph",
                "raw ms",
                "ratio",
                "lt CPU ms",
                "raw CPU ms",
                "floor ms",
                "target ms (PostgreSQL)",
            ],
            rows,
        )
    )
    for r in reads:
        print(
            f"\n[{r.backend}] running the {r.steps} steps to the first wait took "
            f"{r.setup['longtask']:.1f} s (longtask) and {r.setup['raw']:.1f} s (raw)."
        )
    print(
        "\n(The thread: a chain of trivial steps with ~2 KB results, then pairs of a wait for "
        "an outside event and one step. status vs get_state: the latest checkpoint; history "
        "vs get_state_history(limit=20): the 20 latest checkpoints; resume: deliver the "
        "wait's event (Runner.signal; raw: stream Command(resume=...)) and run the one step "
        "after it to the next wait. compile: a first Runner.graph() of a new task object of "
        "that many steps (the cache is per task), against building and compiling the raw "
        "StateGraph. One untimed call of each read first. 'new Runner' / 'new saver': each read "
        "on a Runner (a raw graph and saver) opened just before, untimed, as a new process "
        "would read: nothing cached. CPU = this process's CPU time (the client side; the "
        "database server's is not counted): on a loaded machine the wall time is mostly "
        "waiting for a CPU. floor = the raw graph on LangGraph's InMemorySaver, nothing "
        "durable: LangGraph's own cost of the read or of the resume (two super-steps; "
        "longtask's wait is three nodes, so its resume runs four). The raw compile is its own "
        "floor: no saver takes part.)"
    )


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser)
    parser.add_argument(
        "--reps", type=int, default=None, help="timed runs per case (11; 2 with --quick)"
    )
    parser.add_argument(
        "--parts",
        default="time,profile,storage,reads",
        help="comma-separated subset of time,profile,storage,reads",
    )
    parser.add_argument(
        "--read-steps", type=int, default=None, help="steps of the thread of part 4 (2000)"
    )
    args = parser.parse_args(argv)

    backends = backends_of(args)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if args.quick:
        shapes = [Shape("linear", 20, 1), Shape("wide", 4, 4)]
        sizes = {"linear": [10, 20, 50], "wide": [16, 48]}
        reps = args.reps or 2
        read_steps, compile_steps = args.read_steps or 50, 40
    else:
        shapes = [Shape("linear", 200, 1), Shape("wide", 20, 8)]
        sizes = {"linear": [50, 200, 800, 2000], "wide": [48, 200, 800]}
        reps = args.reps or 11
        read_steps, compile_steps = args.read_steps or 2000, 1600
    read_reps = max(5, min(reps, 7)) if not args.quick else reps

    workdir = print_header(args, backends)
    started = time.perf_counter()

    timings: list[Timing] = []
    profiles: list[Profile] = []
    storage: list[StorageRun] = []
    reads: list[Reads] = []
    try:
        for name in backends:
            backend = Backend(name, workdir, args.pg)
            if "time" in parts:
                for shape in shapes:
                    t0 = time.perf_counter()
                    timings.append(time_shape(backend, shape, reps))
                    print(
                        f"  [{name}] timed {shape.label} in {time.perf_counter() - t0:.1f} s",
                        file=sys.stderr,
                    )
            if "profile" in parts:
                for shape in shapes:
                    profiles.append(profile_shape(backend, shape))
            if "storage" in parts:
                for kind, steps_list in sizes.items():
                    for steps in steps_list:
                        for impl in ("longtask", "raw"):
                            t0 = time.perf_counter()
                            shape = storage_shape(kind, steps)
                            storage.append(storage_run(backend, impl, shape))
                            print(
                                f"  [{name}] storage {impl} {shape.label} in "
                                f"{time.perf_counter() - t0:.1f} s",
                                file=sys.stderr,
                            )
            if "reads" in parts:
                t0 = time.perf_counter()
                reads.append(reads_run(backend, read_steps, compile_steps, read_reps))
                print(
                    f"  [{name}] reads at {read_steps} steps in {time.perf_counter() - t0:.1f} s",
                    file=sys.stderr,
                )
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    if timings:
        print_timings(timings, reps)
    if profiles:
        print_profiles(profiles, timings)
    if storage:
        print_storage(storage)
    if reads:
        print_reads(reads, read_reps)
    print_footer(started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
