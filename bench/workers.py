#!/usr/bin/env python
"""Workers: throughput with 1, 2 and 4 worker processes, and how long a killed worker's
thread takes to continue on another worker (PostgreSQL only).

    python bench/workers.py                       # full run (~4 min here)
    python bench/workers.py --quick               # smoke run: 40 tasks, 5 kills
    python bench/workers.py --pg postgresql://root@127.0.0.1:5432/test
    python bench/workers.py --parts throughput    # or: takeover
    python bench/workers.py --workers 1,2,4,8 --tasks 400 --kills 50 --stalled-after 1

Two parts:

1. Throughput: 200 threads of 10 trivial steps (a chain; each step returns a small dict).
   Baseline: one process runs them one after another with ``Runner.start`` (no queue).
   Then, for N = 1, 2, 4: N ``longtask worker`` processes are started and left to come up
   (each has sent its first heartbeat and is idle), the 200 threads are submitted with
   ``Runner.submit`` as fast as one process can, and the clock runs from the first submit
   until every thread is completed (polled every 50 ms). A fresh database per measurement;
   3 repetitions (1 with ``--quick``), alternating the order, and the medians.
2. Takeover: 2 workers with ``--stalled-after`` 1 s; a thread whose first step sleeps 1.5 s;
   0.1-1.1 s after the step has started (a seeded random delay), SIGKILL the worker holding
   it and measure until its job is retried and fetched again (procrastinate's events), the
   other worker holds the thread's lease, and that step's ``step.started`` event of the
   new run (its timestamp); then wait for the thread to complete and start a replacement
   worker. Repeated 20 times (5 with ``--quick``) on one database.

This is a benchmark, not a test: it prints figures and never checks them against a target.
Databases are created through the admin URL ``--pg`` / ``$LONGTASK_BENCH_PG`` and dropped
afterwards. The worker processes and this process share the machine (and the PostgreSQL
server), so the figures say what one machine does, not what a fleet does.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from _common import Backend, PostgresEnv, add_common_args, print_footer, print_header, table

from longtask import LongTask, Stage, StepContext, function_step

HERE = Path(__file__).resolve()
STEPS = 10
HOLD_SECONDS = 1.5


# --------------------------------------------------------------------------------------------
# The tasks (the workers import this file by path: keep module level free of side effects)
# --------------------------------------------------------------------------------------------


def _trivial_step(i: int) -> Any:
    def run(ctx: StepContext) -> dict[str, int]:
        return {"i": i}

    run.__name__ = run.__qualname__ = f"trivial_{i}"
    return function_step(run, name=f"s{i}")


trivial = LongTask(
    "bench_trivial",
    version="1",
    stages=[Stage(f"stage{i}", [_trivial_step(i)]) for i in range(STEPS)],
)


def _hold(ctx: StepContext) -> dict[str, int]:
    time.sleep(HOLD_SECONDS)
    return {"pid": os.getpid()}


def _after(ctx: StepContext) -> dict[str, int]:
    return {"pid": os.getpid()}


hold = LongTask(
    "bench_hold",
    version="1",
    stages=[
        Stage("a", [function_step(_hold, name="hold")]),
        Stage("b", [function_step(_after, name="after")]),
    ],
)

TRIVIAL_REF = f"{HERE}:trivial"
HOLD_REF = f"{HERE}:hold"


# --------------------------------------------------------------------------------------------
# Worker processes
# --------------------------------------------------------------------------------------------


@dataclass
class Fleet:
    url: str
    logs: Path
    stalled_after: float
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started: int = 0

    def start(self, prefix: str = "w") -> str:
        self.started += 1
        name = f"{prefix}{self.started}-{uuid.uuid4().hex[:4]}"
        with open(self.logs / f"{name}.log", "wb") as out:
            self.procs[name] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "longtask",
                    "worker",
                    "--stalled-after",
                    str(self.stalled_after),
                    "--name",
                    name,
                ],
                env={**os.environ, "LONGTASK_DB": self.url},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return name

    def kill(self, name: str) -> float:
        """SIGKILL ``name``; returns the time by which it was certainly dead."""
        proc = self.procs.pop(name)
        proc.kill()
        proc.wait(10)
        return time.time()

    def wait_ready(self, names: list[str], timeout: float = 60) -> None:
        """Until every one of ``names`` has sent a heartbeat (it is up and serving)."""
        deadline = time.monotonic() + timeout
        while True:
            with psycopg.connect(self.url, autocommit=True) as conn:
                seen = {str(r[0]) for r in conn.execute("SELECT name FROM longtask_workers")}
            if set(names) <= seen:
                return
            for name in names:
                proc = self.procs.get(name)
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"worker {name} exited:\n{self.tail(name)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers {names} not up after {timeout}s")
            time.sleep(0.05)

    def tail(self, name: str, lines: int = 20) -> str:
        path = self.logs / f"{name}.log"
        text = path.read_text(errors="replace").splitlines() if path.exists() else []
        return "\n".join(text[-lines:])

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        self.procs.clear()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (Linux /proc; 0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ServerCpu:
    """CPU time of the PostgreSQL backends serving one database (the server runs on this
    machine): sampled at the start and the end; backends that came and went in between
    (short connections) are not counted, nor the server's background processes."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.start = self._sample()

    def _sample(self) -> dict[int, float]:
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        ).fetchall()
        return {int(r[0]): _cpu_seconds(int(r[0])) for r in rows}

    def used(self) -> float:
        end = self._sample()
        return sum(cpu - self.start.get(pid, 0.0) for pid, cpu in end.items())


def _scalar(url: str, sql: str, params: tuple[Any, ...] = ()) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql.encode(), params).fetchone()
    return row[0] if row else None


def _until(what: str, ok: Callable[[], bool], timeout: float, poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll)


# --------------------------------------------------------------------------------------------
# Part 1: throughput
# --------------------------------------------------------------------------------------------


@dataclass
class Throughput:
    label: str
    workers: int  # 0: inline baseline
    tasks: int
    seconds: float
    submit_seconds: float | None = None
    busy_seconds: float | None = None  # first step.started .. last longtask.completed
    jobs_per_worker: list[int] = field(default_factory=list)
    client_cpu: float = 0.0  # CPU seconds of the workers (or the inline process)
    server_cpu: float = 0.0  # CPU seconds of the PostgreSQL backends of the database

    @property
    def steps_per_s(self) -> float:
        return self.tasks * STEPS / self.seconds


def inline_baseline(backend: Backend, tasks: int) -> Throughput:
    with backend.fresh("inline") as env:
        assert isinstance(env, PostgresEnv)
        runner = env.runner()
        runner.start(trivial, thread_id="warm-up")  # imports, compiled graph, pool
        with psycopg.connect(env.url, autocommit=True) as conn:
            server = ServerCpu(conn)
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            for i in range(tasks):
                runner.start(trivial, thread_id=f"t{i:04d}")
            seconds = time.perf_counter() - t0
            client_cpu = time.process_time() - cpu0
            server_cpu = server.used()
    return Throughput(
        "inline (Runner.start, 1 process)",
        0,
        tasks,
        seconds,
        client_cpu=client_cpu,
        server_cpu=server_cpu,
    )


def with_workers(backend: Backend, tasks: int, n: int, logs: Path) -> Throughput:
    with backend.fresh(f"w{n}") as env:
        assert isinstance(env, PostgresEnv)
        runner = env.runner()  # migrates (procrastinate's tables too)
        fleet = Fleet(env.url, logs, stalled_after=30.0)
        poll = psycopg.connect(env.url, autocommit=True)
        try:
            names = [fleet.start() for _ in range(n)]
            fleet.wait_ready(names)
            server = ServerCpu(poll)
            pids = [fleet.procs[name].pid for name in names]
            cpu0 = sum(_cpu_seconds(pid) for pid in pids)
            t0 = time.perf_counter()
            for i in range(tasks):
                runner.submit(trivial, thread_id=f"t{i:04d}", task_ref=TRIVIAL_REF)
            submitted = time.perf_counter() - t0

            def done() -> bool:
                row = poll.execute(
                    "SELECT count(*) FROM longtask_threads WHERE status = 'completed'"
                ).fetchone()
                return row is not None and int(row[0]) == tasks

            _until(f"{tasks} threads to complete on {n} workers", done, 600)
            seconds = time.perf_counter() - t0
            client_cpu = sum(_cpu_seconds(pid) for pid in pids) - cpu0
            server_cpu = server.used()
            busy = _scalar(
                env.url,
                "SELECT max(ts) FILTER (WHERE kind = 'longtask.completed') "
                "- min(ts) FILTER (WHERE kind = 'step.started') FROM longtask_events",
            )
            with psycopg.connect(env.url, autocommit=True) as conn:
                jobs = [int(r[0]) for r in conn.execute("SELECT jobs FROM longtask_workers")]
        finally:
            poll.close()
            fleet.stop_all()
    return Throughput(
        f"{n} worker{'s' if n > 1 else ''}",
        n,
        tasks,
        seconds,
        submit_seconds=submitted,
        busy_seconds=float(busy) if busy is not None else None,
        jobs_per_worker=sorted(jobs, reverse=True),
        client_cpu=client_cpu,
        server_cpu=server_cpu,
    )


def print_throughput(runs: list[Throughput], tasks: int, reps: int) -> None:
    print(
        f"\n## 1. Throughput: {tasks} threads x {STEPS} trivial steps (wall time from the "
        f"first submit to the last completion; median of {reps} repetition"
        f"{'s' if reps > 1 else ''})\n"
    )
    by_n: dict[int, list[Throughput]] = {}
    for r in runs:
        by_n.setdefault(r.workers, []).append(r)

    def rate(n: int) -> float:
        return statistics.median(r.steps_per_s for r in by_n[n])

    out = []
    for n, rs in sorted(by_n.items()):
        rates = [r.steps_per_s for r in rs]
        submits = [r.submit_seconds for r in rs if r.submit_seconds is not None]
        busy = [r.tasks * STEPS / r.busy_seconds for r in rs if r.busy_seconds]
        per_server_s = [r.tasks * STEPS / r.server_cpu for r in rs if r.server_cpu]
        out.append(
            [
                rs[0].label,
                f"{statistics.median(r.seconds for r in rs):.2f}",
                f"{rate(n):.0f}",
                f"{min(rates):.0f}-{max(rates):.0f}",
                f"{1000 / rate(n):.2f}",
                f"{rate(n) / rate(1):.2f}" if 1 in by_n else "-",
                f"{rate(n) / rate(0):.2f}" if 0 in by_n else "-",
                f"{statistics.median(submits):.2f}" if submits else "-",
                f"{statistics.median(busy):.0f}" if busy else "-",
                f"{statistics.median(1000 * r.client_cpu / (r.tasks * STEPS) for r in rs):.2f}",
                f"{statistics.median(1000 * r.server_cpu / (r.tasks * STEPS) for r in rs):.2f}",
                f"{statistics.median(per_server_s):.0f}" if per_server_s else "-",
                "/".join(str(j) for j in rs[-1].jobs_per_worker) or "-",
            ]
        )
    print(
        table(
            [
                "run",
                "seconds",
                "steps/s",
                "range",
                "ms/step",
                "x 1 worker",
                "x inline",
                "submit s",
                "steps/s busy",
                "client CPU ms/step",
                "PG CPU ms/step",
                "steps per PG CPU s",
                "jobs per worker",
            ],
            out,
        )
    )
    print(
        "\n(steps/s = threads x steps / wall time, over all workers; `range` = min-max over "
        "the repetitions; ms/step = 1000 / steps/s. `x 1 worker` and `x inline` are ratios of "
        "the median steps/s. `submit s`: the time the one submitting process took to submit "
        "every thread (the workers were already running them). `steps/s busy`: steps / "
        "(last longtask.completed - first step.started, from the event timestamps). `client "
        "CPU`: CPU time (user + system) of the worker processes while they ran the threads "
        "(their start-up excluded), or of the inline process. `PG CPU`: CPU time of the "
        "PostgreSQL backends connected to the database (the workers', the submitter's), "
        "from /proc, at the end minus at the start; `steps per PG CPU s` = steps / that "
        "time, what one PostgreSQL core would sustain at this load if nothing else limited "
        "it (WAL writer, checkpointer and the other server processes not included). `jobs "
        "per worker`: wake-up jobs each worker ran (last repetition, from longtask_workers).)"
    )


# --------------------------------------------------------------------------------------------
# Part 2: takeover after a SIGKILL
# --------------------------------------------------------------------------------------------


@dataclass
class Takeover:
    retried: float  # kill -> the job is put back in the queue (a worker saw it stalled)
    fetched: float  # kill -> a worker has fetched it again
    lease: float  # kill -> another worker holds the thread's lease
    step: float  # kill -> step.started of the interrupted step from the new run


def _job_events(url: str, thread: str, since: float) -> dict[str, float]:
    """When the thread's wake-up job was put back in the queue and fetched again after
    ``since`` (procrastinate's own status events; read before the job is deleted)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT e.type::text, extract(epoch FROM e.at) FROM procrastinate_events e "
            "JOIN procrastinate_jobs j ON j.id = e.job_id WHERE j.lock = %s "
            "AND j.task_name = 'longtask.advance' ORDER BY e.id",
            (thread,),
        ).fetchall()
    found: dict[str, float] = {}
    for kind, at in rows:
        if float(at) > since and kind in ("deferred_for_retry", "started"):
            found.setdefault(str(kind), float(at))
    return found


def takeovers(backend: Backend, kills: int, stalled_after: float, logs: Path) -> list[Takeover]:
    out: list[Takeover] = []
    rng = random.Random(1)
    with backend.fresh("takeover") as env:
        assert isinstance(env, PostgresEnv)
        runner = env.runner()
        store = runner.db.store
        fleet = Fleet(env.url, logs, stalled_after=stalled_after)
        try:
            names = [fleet.start() for _ in range(2)]
            fleet.wait_ready(names)
            for i in range(kills):
                thread = f"h{i:03d}"
                runner.submit(hold, thread_id=thread, task_ref=HOLD_REF)

                def started(thread: str = thread) -> bool:
                    return bool(runner.events(thread, kinds=["step.started"]))

                _until(f"{thread}'s step to start", started, 60, poll=0.01)
                holder = store.lease_holder(thread)
                assert holder is not None, f"{thread} has started but has no lease holder"
                killed = holder[0]
                # Somewhere inside the 1.5 s step, at a random phase of the other worker's
                # polling and heartbeat loops.
                time.sleep(rng.uniform(0.1, 1.1))
                dead_at = fleet.kill(killed)
                lease_at: float | None = None
                step_at: float | None = None
                deadline = time.monotonic() + 60
                while lease_at is None or step_at is None:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{thread} was not taken over in 60 s")
                    if lease_at is None:
                        now = store.lease_holder(thread)
                        if now is not None and now[0] != killed:
                            lease_at = time.time()
                    if step_at is None:
                        after = [
                            e.ts.timestamp()
                            for e in runner.events(thread, kinds=["step.started"])
                            if e.ts.timestamp() > dead_at
                        ]
                        if after:
                            step_at = min(after)
                    time.sleep(0.01)
                job = _job_events(env.url, thread, dead_at)
                if "deferred_for_retry" not in job or "started" not in job:
                    raise RuntimeError(f"{thread}: no retry of its job in {job}")
                row = Takeover(
                    job["deferred_for_retry"] - dead_at,
                    job["started"] - dead_at,
                    lease_at - dead_at,
                    step_at - dead_at,
                )
                out.append(row)
                print(
                    f"  kill {i + 1}/{kills}: job retried after {row.retried:.2f} s, fetched "
                    f"after {row.fetched:.2f} s, lease taken over after {row.lease:.2f} s, "
                    f"step restarted after {row.step:.2f} s",
                    file=sys.stderr,
                )

                def completed(thread: str = thread) -> bool:
                    return runner.status(thread).status == "completed"

                _until(f"{thread} to complete", completed, 60)
                replacement = fleet.start()
                fleet.wait_ready([replacement])
        finally:
            fleet.stop_all()
    return out


def print_takeovers(rows: list[Takeover], stalled_after: float) -> None:
    print(
        f"\n## 2. Takeover: SIGKILL of the worker holding a thread mid-step -> another worker "
        f"continues it (--stalled-after {stalled_after:g} s, {len(rows)} kills)\n"
    )

    def stats(values: list[float]) -> list[str]:
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        return [
            f"{statistics.median(values):.2f}",
            f"{min(values):.2f}",
            f"{p90:.2f}",
            f"{max(values):.2f}",
            f"{statistics.median(values) / stalled_after:.2f}",
        ]

    print(
        table(
            ["seconds after the kill", "median", "min", "p90", "max", "median / stalled-after"],
            [
                ["the job is retried (stall seen)", *stats([r.retried for r in rows])],
                ["a worker fetches the job again", *stats([r.fetched for r in rows])],
                ["another worker holds the lease", *stats([r.lease for r in rows])],
                ["the step starts again (event ts)", *stats([r.step for r in rows])],
            ],
        )
    )
    print(
        "\n(From the SIGKILL (once the process is reaped) to: procrastinate's "
        "`deferred_for_retry` and next `started` events of the thread's job (`at`, the "
        "server's transaction time); the lease row naming another worker (polled every 10 "
        "ms); the timestamp of the new run's `step.started` event of the interrupted step.)"
    )


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser)
    parser.add_argument("--tasks", type=int, default=None, help="threads (200; 40 with --quick)")
    parser.add_argument("--workers", default="1,2,4", help="worker counts (default 1,2,4)")
    parser.add_argument("--kills", type=int, default=None, help="kills (20; 5 with --quick)")
    parser.add_argument(
        "--stalled-after", type=float, default=1.0, help="for the takeover part (default 1)"
    )
    parser.add_argument("--parts", default="throughput,takeover")
    parser.add_argument(
        "--reps", type=int, default=None, help="throughput repetitions (3; 1 with --quick)"
    )
    args = parser.parse_args(argv)
    if args.backend == "sqlite":
        parser.error("workers need PostgreSQL: --backend postgres (the default here)")
    args.backend = "postgres"
    tasks = args.tasks or (40 if args.quick else 200)
    kills = args.kills or (5 if args.quick else 20)
    reps = args.reps or (1 if args.quick else 3)
    counts = [int(x) for x in args.workers.split(",") if x.strip()]
    parts = {p.strip() for p in args.parts.split(",")}

    workdir = print_header(args, ["postgres"])
    logs = workdir / "worker-logs"
    logs.mkdir(parents=True, exist_ok=True)
    print(f"worker logs in {logs}")
    started = time.perf_counter()
    backend = Backend("postgres", workdir, args.pg)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # run the finally blocks
    try:
        if "throughput" in parts:
            runs: list[Throughput] = []
            for rep in range(reps):
                order = [0, *counts]
                if rep % 2:  # alternate the order, so drift of the machine evens out
                    order.reverse()
                for n in order:
                    if n == 0:
                        runs.append(inline_baseline(backend, tasks))
                    else:
                        runs.append(with_workers(backend, tasks, n, logs))
                    print(
                        f"  rep {rep + 1}/{reps}: {runs[-1].label}: {runs[-1].seconds:.1f} s",
                        file=sys.stderr,
                    )
            print_throughput(runs, tasks, reps)
        if "takeover" in parts:
            print_takeovers(takeovers(backend, kills, args.stalled_after, logs), args.stalled_after)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print_footer(started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
