"""What the benchmarks share: a fresh database per measurement with the savers set up the
way ``longtask.checkpointers`` sets them up, byte counting per thread, the ~2 KB payloads,
the command-line flags every benchmark takes, and the table printing.

Not a module of longtask: ``bench/*.py`` scripts import it from their own directory.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import importlib.metadata
import os
import platform
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

import longtask
from longtask import Runner
from longtask.checkpointers import Database

DEFAULT_PG = os.environ.get("LONGTASK_BENCH_PG", "postgresql://root@127.0.0.1:5432/test")
PAYLOAD_CHARS = 2000
MARKER_STEP = 3

ResultFn = Callable[[int], dict[str, Any]]


def payload_maker(tag: str) -> tuple[ResultFn, bytes]:
    """~2 KB results that differ per step (or item); the result of step (item)
    MARKER_STEP carries a marker unique to ``tag``, to count the copies stored of it."""
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


# --------------------------------------------------------------------------------------------
# Backends: a fresh database per measurement, savers set up the way longtask sets them up
# --------------------------------------------------------------------------------------------


@dataclass
class Storage:
    """Bytes one thread stored, by table (logical sizes: what the saver and the store wrote).

    The same fields for both sides: ``checkpoints`` are the checkpoint rows (LangGraph's
    ``checkpoints``: checkpoint + metadata; longtask's ``longtask_cp_checkpoints``: state and
    metadata), ``values`` the channel values stored apart from them
    (``checkpoint_blobs`` of PostgresSaver, ``longtask_cp_values``; SqliteSaver keeps them in
    the checkpoint rows), ``writes`` the pending writes. longtask also stores results above
    a size in ``longtask_blobs``, map items in ``longtask_map_items`` and its event log."""

    checkpoints: int = 0
    checkpoint_rows: int = 0
    values: int = 0
    value_rows: int = 0
    writes: int = 0
    lt_blobs: int = 0
    map_items: int = 0  # longtask_map_items.result
    map_item_rows: int = 0
    events: int = 0
    event_rows: int = 0
    thread_row: int = 0
    marker: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        """Everything the thread stored but its thread record (events included)."""
        return (
            self.checkpoints
            + self.values
            + self.writes
            + self.lt_blobs
            + self.map_items
            + self.events
        )


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


# (field, query) pairs: each query selects byte strings whose lengths add up to the field,
# for one thread (the parameter). ``{b}`` turns a column into its bytes in the dialect.
_RAW_SQLITE = [
    ("checkpoints", "SELECT checkpoint, metadata FROM checkpoints WHERE thread_id = ?"),
    ("writes", "SELECT value FROM writes WHERE thread_id = ?"),
]
_RAW_PG = [
    (
        "checkpoints",
        "SELECT convert_to(checkpoint::text, 'UTF8'), convert_to(metadata::text, 'UTF8') "
        "FROM checkpoints WHERE thread_id = %s",
    ),
    ("values", "SELECT blob FROM checkpoint_blobs WHERE thread_id = %s"),
    ("writes", "SELECT blob FROM checkpoint_writes WHERE thread_id = %s"),
]
_LONGTASK = [
    (
        "checkpoints",
        "SELECT state, {b(metadata)} FROM longtask_cp_checkpoints WHERE thread_id = ?",
    ),
    ("values", "SELECT value FROM longtask_cp_values WHERE thread_id = ?"),
    ("writes", "SELECT value FROM longtask_cp_writes WHERE thread_id = ?"),
    ("map_items", "SELECT {b(result)} FROM longtask_map_items WHERE thread_id = ?"),
    # blobs are content-addressed and shared: each database here holds one thread
    ("lt_blobs", "SELECT data FROM longtask_blobs WHERE CAST(? AS TEXT) IS NOT NULL"),
]
# events: their text columns plus 24 bytes for the numbers (id, attempt, ts)
_EVENTS = (
    "SELECT count(*), coalesce(sum({len(kind)} + coalesce({len(stage)}, 0) "
    "+ coalesce({len(step)}, 0) + {len(data)} + {len(dedupe_key)} + 24), 0) "
    "FROM longtask_events WHERE thread_id = ?"
)
_THREAD = (
    "SELECT coalesce(sum({len(definition)} + coalesce({len(inputs)}, 0)), 0) "
    "FROM longtask_threads WHERE thread_id = ?"
)
_ROWS = {"checkpoints": "checkpoint_rows", "values": "value_rows", "map_items": "map_item_rows"}


def _dialect(sql: str, postgres: bool) -> str:
    if postgres:
        sql = re.sub(r"\{b\((\w+)\)\}", r"convert_to(\1, 'UTF8')", sql)
        sql = re.sub(r"\{len\((\w+)\)\}", r"octet_length(\1)", sql)
        return sql.replace("?", "%s")
    sql = re.sub(r"\{b\((\w+)\)\}", r"CAST(\1 AS BLOB)", sql)
    return re.sub(r"\{len\((\w+)\)\}", r"length(CAST(\1 AS BLOB))", sql)


def _measure(
    execute: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]],
    tables: set[str],
    thread_id: str,
    marker: bytes | None,
    postgres: bool,
) -> Storage:
    s = Storage()
    longtask_db = "longtask_cp_checkpoints" in tables
    queries = (
        [(f, _dialect(q, postgres)) for f, q in _LONGTASK]
        if longtask_db
        else (_RAW_PG if postgres else _RAW_SQLITE)
    )
    for name, sql in queries:
        total = rows = 0
        for row in execute(sql, (thread_id,)):
            rows += 1
            for cell in row:
                data = bytes(cell) if cell is not None else b""
                total += len(data)
                if marker:
                    s.marker[name] += data.count(marker)
        setattr(s, name, getattr(s, name) + total)
        if name in _ROWS:
            setattr(s, _ROWS[name], rows)
    if longtask_db:
        n, b = execute(_dialect(_EVENTS, postgres), (thread_id,))[0]
        s.event_rows, s.events = int(n), int(b)
        (t,) = execute(_dialect(_THREAD, postgres), (thread_id,))[0]
        s.thread_row = int(t)
    return s


class SqliteEnv(Env):
    def __init__(self, path: Path) -> None:
        self.path = path
        self._closers: list[Callable[[], None]] = []

    def runner(self) -> Runner:
        r = Runner(f"sqlite:///{self.path}")
        self._closers.append(r.close)
        return r

    def raw_saver(self) -> SqliteSaver:
        # As longtask's SqliteDatabase sets up its connection.
        conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("PRAGMA synchronous=NORMAL")
        saver = SqliteSaver(conn)
        saver.setup()
        self._closers.append(conn.close)
        return saver

    def storage(self, thread_id: str, marker: bytes | None) -> Storage:
        conn = sqlite3.connect(self.path)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            return _measure(
                lambda sql, p: conn.execute(sql, p).fetchall(), tables, thread_id, marker, False
            )
        finally:
            conn.close()

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
        # As longtask's PostgresDatabase sets up its pool.
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
        with psycopg.connect(self.url, autocommit=True) as conn:
            tables = {
                r[0]
                for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            }
            return _measure(
                lambda sql, p: conn.execute(sql, p).fetchall(),  # type: ignore[arg-type]
                tables,
                thread_id,
                marker,
                True,
            )

    def close(self) -> None:
        for close in reversed(self._closers):
            with contextlib.suppress(Exception):
                close()
        self._admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


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


def timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


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


def _git_revision() -> str:
    """The commit of the longtask that was imported, and whether it had local changes."""
    root = Path(longtask.__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "longtask"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown commit"
    return f"commit {head or '?'}" + (" (longtask/ has local changes)" if dirty else "")


def machine_info(pg_admin: str, backends: list[str]) -> list[str]:
    def ver(pkg: str) -> str:
        try:
            return importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    lines = [
        f"longtask at {_git_revision()}",
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs "
        f"(nproc {len(os.sched_getaffinity(0))}), "
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


# --------------------------------------------------------------------------------------------
# Command line and the report's header and footer
# --------------------------------------------------------------------------------------------


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """--quick, --backend, --pg and --workdir, as every benchmark takes them."""
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "all"], default="all")
    parser.add_argument(
        "--pg",
        default=DEFAULT_PG,
        help="PostgreSQL admin URL used to create/drop one database per measurement "
        "(default $LONGTASK_BENCH_PG or postgresql://root@127.0.0.1:5432/test)",
    )
    parser.add_argument("--workdir", default=None, help="where SQLite files go (a temp dir)")


def backends_of(args: argparse.Namespace) -> list[str]:
    return ["sqlite", "postgres"] if args.backend == "all" else [args.backend]


def print_header(args: argparse.Namespace, backends: list[str]) -> Path:
    """Print the command, commit, machine, versions and load; returns the SQLite workdir."""
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    print("command: " + shlex.join(["python", *sys.argv]))
    for line in machine_info(args.pg, backends):
        print(line)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="longtask-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(workdir).free
    print(f"SQLite files in {workdir} ({human(free)} free)")
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return workdir


def print_footer(started: float) -> None:
    print(
        f"\ntotal benchmark time: {time.perf_counter() - started:.0f} s; load average at end: "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
