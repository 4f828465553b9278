#!/usr/bin/env python
"""Overhead of longtask over a hand-written LangGraph graph of the same shape.

    python bench/overhead.py                      # full run, SQLite and PostgreSQL
    python bench/overhead.py --quick              # smoke run (small sizes)
    python bench/overhead.py --backend sqlite     # one backend
    python bench/overhead.py --pg postgresql://root@127.0.0.1:5432/test
    python bench/overhead.py --parts time --reps 21   # only the timings, more runs

Three parts, all in one run and against the same saver:

1. Time: median per-step wall time of ``Runner.start`` against ``graph.stream`` of a raw
   ``StateGraph`` with the same nodes, edges, per-node result channels, saver set-up and
   ``durability="sync"``, for a linear task (200 stages of one step) and a wide one
   (20 stages of 8 parallel steps). Per-step time = wall time of one run / steps.
2. Where the time goes: SQL statements per step (by table) and time spent in longtask's
   own tables, from one extra, instrumented run of each (not part of the timings).
3. Storage: bytes a thread stores per step for linear tasks with ~2 KB step results, and
   how often one step's result is stored.

This is a benchmark, not a test: it prints figures and never checks them against a target.
Each measurement gets a fresh SQLite file or a fresh PostgreSQL database (created through the
admin URL ``--pg`` / ``$LONGTASK_BENCH_PG`` and dropped afterwards).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import shutil
import sqlite3
import statistics
import sys
import threading
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
from langgraph.graph import END, START, StateGraph

from longtask import LongTask, Runner, Stage, function_step
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
        counter = iter(range(10**6))

        def run_lt() -> str:
            tid = f"lt-{shape.kind}-{next(counter)}"
            runner.start(task, {}, thread_id=tid)
            return tid

        def run_raw() -> str:
            tid = f"raw-{shape.kind}-{next(counter)}"
            run_raw_graph(graph, tid, shape.width)
            return tid

        # Warm-up (imports, compiled graphs, pool connections, caches): not timed.
        check_lt(runner, run_lt(), shape.steps)
        check_raw(graph, run_raw(), shape.steps)
        lt: list[float] = []
        raw: list[float] = []
        for rep in range(reps):
            # Alternate the order so that drift (caches, autovacuum, file growth) hits both.
            pair = [(run_lt, lt), (run_raw, raw)]
            for fn, out in pair if rep % 2 == 0 else reversed(pair):
                out.append(timed(fn) / shape.steps)
        return Timing(backend.name, shape, lt, raw)


# --------------------------------------------------------------------------------------------
# Part 2: where the time goes (one extra, instrumented run each)
# --------------------------------------------------------------------------------------------


def _category(sql: str) -> str:
    s = " ".join(sql.split()).lower()
    for needle, cat in (
        ("longtask_events", "events"),
        ("longtask_blobs", "lt_blobs"),
        ("longtask_threads", "lt_threads"),
        ("advisory", "lock"),
        ("checkpoint_blobs", "cp_blobs"),
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
    # Wall time inside longtask's own-table SQL (Store._run) and number of statements, on
    # the steps' and the Runner's threads ("inline") and on the event writer's thread.
    lt_inline_seconds: float
    lt_inline_calls: int
    lt_writer_seconds: float
    lt_writer_calls: int


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


def profile_shape(backend: Backend, shape: Shape) -> Profile:
    with backend.fresh("prof_lt") as lt_env, backend.fresh("prof_raw") as raw_env:
        runner = lt_env.runner()
        task = build_longtask(shape, trivial_result, f"bench_{shape.kind}")
        saver = raw_env.raw_saver()
        graph = build_raw(shape, trivial_result, saver)
        # warm-up, not counted
        runner.start(task, {}, thread_id="warm-lt")
        run_raw_graph(graph, "warm-raw", shape.width)

        # Time spent in longtask's own tables: wrap the store's single SQL entry point
        # (a private method; this is instrumentation for the benchmark only), apart for the
        # background thread that writes the events (EventWriter's "longtask-events").
        store: Any = runner.db.store
        orig_run = store._run
        spent = {"inline": [0.0, 0], "writer": [0.0, 0]}

        def timed_run(sql: str, params: Any = ()) -> Any:
            t0 = time.perf_counter()
            try:
                return orig_run(sql, params)
            finally:
                where = "writer" if threading.current_thread().name == "longtask-events" else ""
                acc = spent[where or "inline"]
                acc[0] += time.perf_counter() - t0
                acc[1] += 1

        lt_counts: Counter[str] = Counter()
        raw_counts: Counter[str] = Counter()
        if backend.name == "sqlite":
            db: Any = runner.db
            _sqlite_trace([db.saver.conn, store._conn], lt_counts)
            store._run = timed_run
            runner.start(task, {}, thread_id="prof-lt")
            del store._run  # back to the class's method
            _sqlite_trace([db.saver.conn, store._conn], None)
            _sqlite_trace([saver.conn], raw_counts)  # type: ignore[attr-defined]
            run_raw_graph(graph, "prof-raw", shape.width)
        else:
            pg = _PgCounter()
            with pg.active():
                store._run = timed_run
                runner.start(task, {}, thread_id="prof-lt")
                del store._run
            lt_counts = pg.counts
            pg = _PgCounter()
            with pg.active():
                run_raw_graph(graph, "prof-raw", shape.width)
            raw_counts = pg.counts
        (inline_s, inline_n), (writer_s, writer_n) = spent["inline"], spent["writer"]
        return Profile(
            backend.name,
            shape,
            lt_counts,
            raw_counts,
            inline_s,
            int(inline_n),
            writer_s,
            int(writer_n),
        )


# --------------------------------------------------------------------------------------------
# Part 3: storage
# --------------------------------------------------------------------------------------------


@dataclass
class StorageRun:
    backend: str
    impl: str  # "longtask" or "raw"
    steps: int
    storage: Storage
    seconds: float


def storage_run(backend: Backend, impl: str, steps: int) -> StorageRun:
    shape = Shape("linear", steps, 1)
    tag = uuid.uuid4().hex[:10]
    result, marker = payload_maker(tag)
    with backend.fresh(f"store_{impl}_{steps}") as env:
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
            seconds = timed(lambda: run_raw_graph(graph, tid))
            check_raw(graph, tid, steps)
        return StorageRun(backend.name, impl, steps, env.storage(tid, marker), seconds)


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
            ],
            rows,
        )
    )


def print_profiles(profiles: list[Profile], timings: list[Timing]) -> None:
    print(
        "\n## 2. Where longtask's extra time goes (one instrumented run each; "
        "statements per step)\n"
    )
    cats = [
        "checkpoints",
        "cp_blobs",
        "cp_writes",
        "cp_read",
        "events",
        "lt_threads",
        "lt_blobs",
        "lock",
        "tx",
        "other",
    ]
    rows = []
    by_key = {(t.backend, t.shape): t for t in timings}
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
        t = by_key.get((p.backend, p.shape))
        extra = (t.lt_median - t.raw_median) if t else float("nan")
        inline = p.lt_inline_seconds / n
        rows.append(
            [
                p.backend,
                p.shape.label,
                ms(extra),
                f"{p.lt_inline_calls / n:.2f}",
                ms(inline),
                f"{100 * inline / extra:.0f}%" if extra > 0 else "-",
                f"{p.lt_writer_calls / n:.2f}",
                ms(p.lt_writer_seconds / n),
            ]
        )
    print(
        table(
            [
                "backend",
                "shape",
                "extra ms/step",
                "inline SQL/step",
                "inline ms/step",
                "inline share of extra",
                "writer SQL/step",
                "writer ms/step",
            ],
            rows,
        )
    )
    print(
        "\n(Own-table SQL = longtask's statements on its own tables (events, thread record, "
        "blobs), timed around Store._run in the instrumented run. inline = run on the steps' "
        "and the Runner's threads, on the path of the run; share = that time / the median "
        "extra time from part 1. writer = the event batches, run by the background event "
        "writer while the steps go on: off the path, but competing for the CPUs, the server "
        "and, on SQLite, the connection the saver shares. On SQLite the times include waiting "
        "for that connection's lock. In the wide shape the steps of a stage run on parallel "
        "threads, so their times overlap.)"
    )


def print_storage(runs: list[StorageRun], sizes: list[int]) -> None:
    print(
        f"\n## 3. Storage per thread: linear tasks, ~{PAYLOAD_CHARS // 1000} KB results "
        "(logical bytes; fresh database each)\n"
    )
    rows = []
    for r in runs:
        s = r.storage
        copies = sum(s.marker.values())
        where = ", ".join(f"{k} {v}" for k, v in sorted(s.marker.items()) if v)
        rows.append(
            [
                r.backend,
                r.impl,
                str(r.steps),
                human(s.total),
                f"{s.total / r.steps:,.0f}",
                human(s.checkpoints),
                human(s.checkpoint_blobs) if r.backend == "postgres" else "-",
                human(s.writes),
                human(s.lt_blobs) if r.impl == "longtask" else "-",
                f"{copies} ({where})" if copies else "0",
                f"{s.event_rows} / {human(s.events)}" if r.impl == "longtask" else "-",
                ms(r.seconds / r.steps),
            ]
        )
    print(
        table(
            [
                "backend",
                "impl",
                "steps",
                "total",
                "bytes/step",
                "checkpoints",
                "cp_blobs",
                "writes",
                "lt_blobs",
                f"copies of step {MARKER_STEP}'s result",
                "events (extra)",
                "ms/step",
            ],
            rows,
        )
    )
    print("\nGrowth exponent k in total ~ steps^k (1 = linear, 2 = quadratic):\n")
    rows = []
    keyed = {(r.backend, r.impl, r.steps): r.storage.total for r in runs}
    pairs = list(itertools.pairwise(sizes))
    for backend in dict.fromkeys(r.backend for r in runs):
        for impl in ("longtask", "raw"):
            row = [backend, impl]
            for a, b in pairs:
                ta, tb = keyed.get((backend, impl, a)), keyed.get((backend, impl, b))
                row.append(f"{math.log(tb / ta) / math.log(b / a):.2f}" if ta and tb else "-")
            for n in sizes:
                lt_total = keyed.get((backend, "longtask", n))
                raw_total = keyed.get((backend, "raw", n))
                row.append(
                    f"{raw_total / lt_total:.1f}x"
                    if impl == "longtask" and lt_total and raw_total
                    else "-"
                )
            rows.append(row)
    print(
        table(
            [
                "backend",
                "impl",
                *(f"k {a}->{b}" for a, b in pairs),
                *(f"raw/longtask bytes @{n}" for n in sizes),
            ],
            rows,
        )
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
        default="time,profile,storage",
        help="comma-separated subset of time,profile,storage",
    )
    args = parser.parse_args(argv)

    backends = backends_of(args)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if args.quick:
        shapes = [Shape("linear", 20, 1), Shape("wide", 4, 4)]
        sizes = [10, 20, 50]
        reps = args.reps or 2
    else:
        shapes = [Shape("linear", 200, 1), Shape("wide", 20, 8)]
        sizes = [50, 200, 1000]
        reps = args.reps or 11

    workdir = print_header(args, backends)
    started = time.perf_counter()

    timings: list[Timing] = []
    profiles: list[Profile] = []
    storage: list[StorageRun] = []
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
                for steps in sizes:
                    for impl in ("longtask", "raw"):
                        t0 = time.perf_counter()
                        storage.append(storage_run(backend, impl, steps))
                        print(
                            f"  [{name}] storage {impl} {steps} steps in "
                            f"{time.perf_counter() - t0:.1f} s",
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
        print_storage(storage, sizes)
    print_footer(started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
