#!/usr/bin/env python
"""Overhead of longtask over a hand-written LangGraph graph of the same shape.

    python bench/overhead.py                      # full run, SQLite and PostgreSQL
    python bench/overhead.py --quick              # smoke run (small sizes)
    python bench/overhead.py --backend sqlite     # one backend
    python bench/overhead.py --pg postgresql://root@127.0.0.1:5432/test

Three parts, all in one run and against the same saver:

1. Time: median per-step wall time of ``Runner.start`` against ``graph.invoke`` of a raw
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
import gc
import hashlib
import importlib.metadata
import math
import os
import platform
import shlex
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import psycopg
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from longtask import LongTask, Runner, Stage, function_step
from longtask.checkpointers import Database
from longtask.steps import INPUTS_CHANNEL, result_channel

DEFAULT_PG = os.environ.get("LONGTASK_BENCH_PG", "postgresql://root@127.0.0.1:5432/test")
PAYLOAD_CHARS = 2000
MARKER_STEP = 3

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


ResultFn = Callable[[int], dict[str, Any]]


def trivial_result(i: int) -> dict[str, Any]:
    return {"i": i, "ok": True}


def payload_maker(tag: str) -> tuple[ResultFn, bytes]:
    """~2 KB results that differ per step; step MARKER_STEP's carries a unique marker."""
    marker = f"@@marker-{tag}-step{MARKER_STEP}@@"

    def result(i: int) -> dict[str, Any]:
        text = "".join(
            hashlib.sha256(f"{tag}:{i}:{k}".encode()).hexdigest()
            for k in range(PAYLOAD_CHARS // 64 + 1)
        )
        text = text[:PAYLOAD_CHARS]
        if i == MARKER_STEP:
            text = marker + text[len(marker) :]
        return {"step": i, "text": text}

    return result, marker.encode()


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


# --------------------------------------------------------------------------------------------
# Backends: a fresh database per measurement, savers set up the way longtask sets them up
# --------------------------------------------------------------------------------------------


@dataclass
class Storage:
    """Bytes one thread stored, by table (logical sizes: what the saver wrote)."""

    checkpoints: int = 0
    checkpoint_rows: int = 0
    checkpoint_blobs: int = 0  # PostgreSQL only
    writes: int = 0
    lt_blobs: int = 0
    events: int = 0
    event_rows: int = 0
    thread_row: int = 0
    marker: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return self.checkpoints + self.checkpoint_blobs + self.writes + self.lt_blobs


class Env:
    """One fresh database."""

    def runner(self) -> Runner:
        raise NotImplementedError

    def raw_saver(self) -> BaseCheckpointSaver[Any]:
        raise NotImplementedError

    def storage(self, thread_id: str, marker: bytes | None) -> Storage:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class SqliteEnv(Env):
    def __init__(self, path: Path) -> None:
        self.path = path
        self._closers: list[Callable[[], None]] = []

    def runner(self) -> Runner:
        r = Runner(f"sqlite:///{self.path}")
        self._closers.append(r.close)
        return r

    def raw_saver(self) -> SqliteSaver:
        # As longtask's SqliteDatabase does it.
        conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("PRAGMA synchronous=NORMAL")
        saver = SqliteSaver(conn)
        saver.setup()
        self._closers.append(conn.close)
        return saver

    def storage(self, thread_id: str, marker: bytes | None) -> Storage:
        s = Storage()
        conn = sqlite3.connect(self.path)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            for cp, meta in conn.execute(
                "SELECT checkpoint, metadata FROM checkpoints WHERE thread_id = ?", (thread_id,)
            ):
                s.checkpoint_rows += 1
                s.checkpoints += len(cp or b"") + len(meta or b"")
                if marker:
                    s.marker["checkpoints"] += _count(cp, marker) + _count(meta, marker)
            for (value,) in conn.execute(
                "SELECT value FROM writes WHERE thread_id = ?", (thread_id,)
            ):
                s.writes += len(value or b"")
                if marker:
                    s.marker["writes"] += _count(value, marker)
            if "longtask_blobs" in tables:
                for (data,) in conn.execute("SELECT data FROM longtask_blobs"):
                    s.lt_blobs += len(data)
                    if marker:
                        s.marker["longtask_blobs"] += _count(data, marker)
                n, b = conn.execute(
                    "SELECT count(*), coalesce(sum(length(kind) + coalesce(length(stage), 0) "
                    "+ coalesce(length(step), 0) + length(data) + length(dedupe_key) + 24), 0) "
                    "FROM longtask_events WHERE thread_id = ?",
                    (thread_id,),
                ).fetchone()
                s.event_rows, s.events = int(n), int(b)
                (t,) = conn.execute(
                    "SELECT coalesce(sum(length(definition) + coalesce(length(inputs), 0)), 0) "
                    "FROM longtask_threads WHERE thread_id = ?",
                    (thread_id,),
                ).fetchone()
                s.thread_row = int(t)
        finally:
            conn.close()
        return s

    def close(self) -> None:
        for close in reversed(self._closers):
            with contextlib.suppress(Exception):
                close()
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.path}{suffix}")
        shutil.rmtree(f"{self.path}.locks", ignore_errors=True)


class PostgresEnv(Env):
    def __init__(self, admin_url: str, name: str) -> None:
        self.admin_url = admin_url
        self.name = name
        base, _, _ = admin_url.rpartition("/")
        self.url = f"{base}/{name}"
        self._closers: list[Callable[[], None]] = []
        self._admin(f'CREATE DATABASE "{name}"')

    def _admin(self, sql: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def runner(self) -> Runner:
        db = Database.open(self.url, upgrade=True)
        r = Runner(db)
        self._closers.extend([db.close, r.close])
        return r

    def raw_saver(self) -> PostgresSaver:
        # As longtask's PostgresDatabase does it.
        pool: ConnectionPool[Any] = ConnectionPool(
            self.url,
            min_size=1,
            max_size=10,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            open=False,
        )
        pool.open(wait=True, timeout=15)
        saver = PostgresSaver(pool)  # type: ignore[arg-type]
        saver.setup()
        self._closers.append(pool.close)
        return saver

    def storage(self, thread_id: str, marker: bytes | None) -> Storage:
        s = Storage()
        with psycopg.connect(self.url, autocommit=True) as conn:
            tables = {
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                )
            }
            for cp, meta in conn.execute(
                "SELECT checkpoint::text, metadata::text FROM checkpoints WHERE thread_id = %s",
                (thread_id,),
            ):
                s.checkpoint_rows += 1
                cpb, metab = cp.encode(), meta.encode()
                s.checkpoints += len(cpb) + len(metab)
                if marker:
                    s.marker["checkpoints"] += _count(cpb, marker) + _count(metab, marker)
            for (blob,) in conn.execute(
                "SELECT blob FROM checkpoint_blobs WHERE thread_id = %s", (thread_id,)
            ):
                s.checkpoint_blobs += len(blob or b"")
                if marker:
                    s.marker["checkpoint_blobs"] += _count(blob, marker)
            for (blob,) in conn.execute(
                "SELECT blob FROM checkpoint_writes WHERE thread_id = %s", (thread_id,)
            ):
                s.writes += len(blob or b"")
                if marker:
                    s.marker["writes"] += _count(blob, marker)
            if "longtask_blobs" in tables:
                for (data,) in conn.execute("SELECT data FROM longtask_blobs"):
                    s.lt_blobs += len(data)
                    if marker:
                        s.marker["longtask_blobs"] += _count(data, marker)
                row = conn.execute(
                    "SELECT count(*), coalesce(sum(octet_length(kind) "
                    "+ coalesce(octet_length(stage), 0) + coalesce(octet_length(step), 0) "
                    "+ octet_length(data) + octet_length(dedupe_key) + 24), 0) "
                    "FROM longtask_events WHERE thread_id = %s",
                    (thread_id,),
                ).fetchone()
                assert row is not None
                s.event_rows, s.events = int(row[0]), int(row[1])
                row = conn.execute(
                    "SELECT coalesce(sum(octet_length(definition) "
                    "+ coalesce(octet_length(inputs), 0)), 0) "
                    "FROM longtask_threads WHERE thread_id = %s",
                    (thread_id,),
                ).fetchone()
                s.thread_row = int(row[0]) if row else 0
        return s

    def close(self) -> None:
        for close in reversed(self._closers):
            with contextlib.suppress(Exception):
                close()
        self._admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def _count(data: bytes | None, marker: bytes) -> int:
    return bytes(data).count(marker) if data else 0


class Backend:
    def __init__(self, name: str, workdir: Path, pg_admin: str) -> None:
        self.name = name
        self.workdir = workdir
        self.pg_admin = pg_admin

    @contextlib.contextmanager
    def fresh(self, label: str) -> Iterator[Env]:
        tag = f"{label}_{uuid.uuid4().hex[:8]}"
        env: Env
        if self.name == "sqlite":
            env = SqliteEnv(self.workdir / f"bench_{tag}.db")
        else:
            env = PostgresEnv(self.pg_admin, f"lt_bench_{tag}")
        try:
            yield env
        finally:
            env.close()


# --------------------------------------------------------------------------------------------
# Part 1: time per step
# --------------------------------------------------------------------------------------------


@dataclass
class Timing:
    backend: str
    shape: Shape
    lt: list[float]  # seconds per step, one per repetition
    raw: list[float]
    lt_env_note: str = ""

    @property
    def lt_median(self) -> float:
        return statistics.median(self.lt)

    @property
    def raw_median(self) -> float:
        return statistics.median(self.raw)

    @property
    def ratio(self) -> float:
        return self.lt_median / self.raw_median


def _timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


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
            graph.invoke({INPUTS_CHANNEL: {}}, raw_config(tid), durability="sync")
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
                out.append(_timed(fn) / shape.steps)
        return Timing(backend.name, shape, lt, raw)


# --------------------------------------------------------------------------------------------
# Part 2: where the time goes (one extra, instrumented run each)
# --------------------------------------------------------------------------------------------


def _category(sql: str) -> str:
    s = " ".join(sql.split()).lower()
    for table, cat in (
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
        if table in s:
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
    lt_store_seconds: float  # wall time inside longtask's own-table SQL (Store._run)
    lt_store_calls: int


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


def _sqlite_trace(conns: list[sqlite3.Connection], counts: Counter[str]) -> None:
    for conn in conns:
        conn.set_trace_callback(lambda sql: counts.__setitem__(_category(sql), counts[_category(sql)] + 1))


def profile_shape(backend: Backend, shape: Shape) -> Profile:
    with backend.fresh("prof_lt") as lt_env, backend.fresh("prof_raw") as raw_env:
        runner = lt_env.runner()
        task = build_longtask(shape, trivial_result, f"bench_{shape.kind}")
        saver = raw_env.raw_saver()
        graph = build_raw(shape, trivial_result, saver)
        # warm-up, not counted
        runner.start(task, {}, thread_id="warm-lt")
        graph.invoke({INPUTS_CHANNEL: {}}, raw_config("warm-raw"), durability="sync")

        # Time spent in longtask's own tables: wrap the store's single SQL entry point
        # (a private method; this is instrumentation for the benchmark only).
        store: Any = runner.db.store
        orig_run = store._run
        spent = [0.0, 0]

        def timed_run(sql: str, params: Any = ()) -> Any:
            t0 = time.perf_counter()
            try:
                return orig_run(sql, params)
            finally:
                spent[0] += time.perf_counter() - t0
                spent[1] += 1

        lt_counts: Counter[str] = Counter()
        raw_counts: Counter[str] = Counter()
        if backend.name == "sqlite":
            db: Any = runner.db
            _sqlite_trace([db.saver.conn, store._conn], lt_counts)
            store._run = timed_run
            runner.start(task, {}, thread_id="prof-lt")
            store._run = orig_run
            _sqlite_trace([db.saver.conn, store._conn], Counter())
            _sqlite_trace([saver.conn], raw_counts)  # type: ignore[attr-defined]
            graph.invoke({INPUTS_CHANNEL: {}}, raw_config("prof-raw"), durability="sync")
        else:
            pg = _PgCounter()
            with pg.active():
                store._run = timed_run
                runner.start(task, {}, thread_id="prof-lt")
                store._run = orig_run
            lt_counts = pg.counts
            pg = _PgCounter()
            with pg.active():
                graph.invoke({INPUTS_CHANNEL: {}}, raw_config("prof-raw"), durability="sync")
            raw_counts = pg.counts
        return Profile(backend.name, shape, lt_counts, raw_counts, spent[0], int(spent[1]))


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
            tid = f"lt-storage-{steps}"
            seconds = _timed(lambda: runner.start(task, {}, thread_id=tid))
            check_lt(runner, tid, steps)
        else:
            graph = build_raw(shape, result, env.raw_saver())
            tid = f"raw-storage-{steps}"
            seconds = _timed(
                lambda: graph.invoke({INPUTS_CHANNEL: {}}, raw_config(tid), durability="sync")
            )
            check_raw(graph, tid, steps)
        return StorageRun(backend.name, impl, steps, env.storage(tid, marker), seconds)


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        out = []
        for i, c in enumerate(cells):
            out.append(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def human(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def machine_info(pg_admin: str, backends: list[str]) -> list[str]:
    def ver(pkg: str) -> str:
        try:
            return importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), "
        f"{platform.system()} {platform.release()}",
        f"python {platform.python_version()}, langgraph {ver('langgraph')}, "
        f"langgraph-checkpoint {ver('langgraph-checkpoint')}, "
        f"checkpoint-sqlite {ver('langgraph-checkpoint-sqlite')}, "
        f"checkpoint-postgres {ver('langgraph-checkpoint-postgres')}, psycopg {ver('psycopg')}, "
        f"longtask {ver('langgraph-longtask')}",
        f"sqlite {sqlite3.sqlite_version}",
    ]
    if "postgres" in backends:
        with psycopg.connect(pg_admin, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            lines[-1] += f", postgresql {row[0] if row else '?'}"
    return lines


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
    cats = ["checkpoints", "cp_blobs", "cp_writes", "cp_read", "events", "lt_threads",
            "lt_blobs", "lock", "tx", "other"]
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
        store = p.lt_store_seconds / n
        rows.append(
            [
                p.backend,
                p.shape.label,
                ms(extra),
                f"{p.lt_store_calls / n:.2f}",
                ms(store),
                f"{100 * store / extra:.0f}%" if extra > 0 else "-",
            ]
        )
    print(
        table(
            [
                "backend",
                "shape",
                "extra ms/step",
                "own-table SQL/step",
                "own-table ms/step",
                "share of extra",
            ],
            rows,
        )
    )
    print(
        "\n(own-table SQL = longtask's events, thread record and blob statements, "
        "timed around Store._run in the instrumented run; share = that time / the median "
        "extra time from part 1; the rest is Python on longtask's side.)"
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
    pairs = list(zip(sizes, sizes[1:], strict=False))
    for backend in dict.fromkeys(r.backend for r in runs):
        for impl in ("longtask", "raw"):
            row = [backend, impl]
            for a, b in pairs:
                ta, tb = keyed.get((backend, impl, a)), keyed.get((backend, impl, b))
                row.append(f"{math.log(tb / ta) / math.log(b / a):.2f}" if ta and tb else "-")
            row.append(
                f"{keyed[(backend, 'raw', sizes[-1])] / keyed[(backend, impl, sizes[-1])]:.1f}x"
                if (backend, impl, sizes[-1]) in keyed and (backend, "raw", sizes[-1]) in keyed
                else "-"
            )
            rows.append(row)
    print(
        table(
            ["backend", "impl", *(f"{a}->{b}" for a, b in pairs), f"raw/impl at {sizes[-1]}"],
            rows,
        )
    )


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "all"], default="all")
    parser.add_argument(
        "--pg",
        default=DEFAULT_PG,
        help="PostgreSQL admin URL used to create/drop one database per measurement "
        "(default $LONGTASK_BENCH_PG or postgresql://root@127.0.0.1:5432/test)",
    )
    parser.add_argument("--reps", type=int, default=None, help="timed runs per case (5)")
    parser.add_argument(
        "--parts",
        default="time,profile,storage",
        help="comma-separated subset of time,profile,storage",
    )
    parser.add_argument("--workdir", default=None, help="where SQLite files go (a temp dir)")
    args = parser.parse_args(argv)

    backends = ["sqlite", "postgres"] if args.backend == "all" else [args.backend]
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if args.quick:
        shapes = [Shape("linear", 20, 1), Shape("wide", 4, 4)]
        sizes = [10, 20, 50]
        reps = args.reps or 2
    else:
        shapes = [Shape("linear", 200, 1), Shape("wide", 20, 8)]
        sizes = [50, 200, 1000]
        reps = args.reps or 5

    print("command: " + shlex.join(["python", *sys.argv]))
    for line in machine_info(args.pg, backends):
        print(line)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="longtask-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(workdir).free
    print(f"SQLite files in {workdir} ({human(free)} free)")
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
                    print(f"  [{name}] timed {shape.label} in {time.perf_counter() - t0:.1f} s",
                          file=sys.stderr)
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
    print(f"\ntotal benchmark time: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
