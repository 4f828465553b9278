#!/usr/bin/env python
"""Sub-tasks on workers: a parent fanning out to N children of ~1 s each, run by W
``longtask worker`` processes, against the same tree run sequentially (PostgreSQL only).

    python bench/subtasks.py                      # 50 children, 4 workers (~80 s here)
    python bench/subtasks.py --quick              # 12 children
    python bench/subtasks.py --children 50 --workers 4 --seconds 1.0

1. Sequential: one process runs the parent with ``Runner.start``; without workers the
   children run in that process one after another, each as a thread of its own.
2. Workers: W worker processes are started and left to come up (each has sent its first
   heartbeat), the parent is submitted with ``Runner.submit``, and the clock runs from the
   submit until the parent is completed (polled every 50 ms): the parent's step queues one
   job per child, the workers run them in parallel, and the last child's end queues the
   parent's continuation.

A fresh database for each. This is a benchmark, not a test: it prints figures and never
checks them against a target. The workers, this process and PostgreSQL share the machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from _common import PostgresEnv, add_common_args, print_footer, print_header, table
from pydantic import BaseModel

from longtask import LongTask, Stage, StepContext, function_step, subtask_step

HERE = Path(__file__).resolve()
#: how long each child's one step sleeps (seconds); a worker reads it from the environment
SECONDS_ENV = "LT_BENCH_CHILD_SECONDS"


class Item(BaseModel):
    n: int


class Fan(BaseModel):
    children: int


@function_step
def work(ctx: StepContext) -> int:
    time.sleep(float(os.environ.get(SECONDS_ENV, "1.0")))
    return int(ctx.inputs.n)


child = LongTask("bench_child", inputs=Item, stages=[Stage("work", [work])])


def _items(ctx: StepContext) -> list[int]:
    return list(range(ctx.inputs.children))


def _inputs(ctx: StepContext, n: int) -> dict[str, int]:
    return {"n": n}


parent = LongTask(
    "bench_parent",
    inputs=Fan,
    stages=[Stage("fan", [subtask_step("fan", child, over=_items, inputs=_inputs)])],
)


def _sequential(admin: str, children: int) -> float:
    env = PostgresEnv(admin, f"lt_bench_sub_{uuid.uuid4().hex[:8]}")
    try:
        runner = env.runner()
        t0 = time.perf_counter()
        thread = runner.start(parent, {"children": children})
        took = time.perf_counter() - t0
        assert runner.status(thread).status == "completed"
        return took
    finally:
        env.close()


def _workers(admin: str, children: int, workers: int, logs: Path) -> float:
    env = PostgresEnv(admin, f"lt_bench_sub_{uuid.uuid4().hex[:8]}")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        runner = env.runner()  # migrates the database before the workers open it
        names = [f"bw{i}-{uuid.uuid4().hex[:4]}" for i in range(workers)]
        for name in names:
            with open(logs / f"{name}.log", "wb") as out:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "longtask", "worker", "--name", name],
                        env={**os.environ, "LONGTASK_DB": env.url},
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
        deadline = time.monotonic() + 60
        while True:
            with psycopg.connect(env.url, autocommit=True) as conn:
                seen = {str(r[0]) for r in conn.execute("SELECT name FROM longtask_workers")}
            if set(names) <= seen:
                break
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"workers did not come up; see {logs}")
            time.sleep(0.05)
        t0 = time.perf_counter()
        thread = runner.submit(parent, {"children": children}, task_ref=f"{HERE}:parent")
        while runner.status(thread, usage=False).status != "completed":
            if time.perf_counter() - t0 > 30 + 3 * children:
                raise RuntimeError(f"the tree did not complete; see {logs}")
            time.sleep(0.05)
        return time.perf_counter() - t0
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(10)
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser)
    parser.add_argument("--children", type=int, default=None, help="default 50 (12 --quick)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=1.0, help="each child's sleep")
    args = parser.parse_args()
    children = args.children or (12 if args.quick else 50)
    os.environ[SECONDS_ENV] = str(args.seconds)  # this process and the workers it starts
    started = time.perf_counter()
    workdir = print_header(args, ["postgres"])
    seq = _sequential(args.pg, children)
    par = _workers(args.pg, children, args.workers, workdir)
    ideal = children * args.seconds / args.workers
    rows: list[list[Any]] = [
        ["sequential (1 process)", "-", f"{seq:.1f}", "1.00"],
        [f"{args.workers} workers", str(args.workers), f"{par:.1f}", f"{par / seq:.2f}"],
        [
            "ideal (children x seconds / workers)",
            str(args.workers),
            f"{ideal:.1f}",
            f"{ideal / seq:.2f}",
        ],
    ]
    print(f"\nsub-tasks: {children} children of {args.seconds:g} s each, PostgreSQL")
    print(table(["run", "workers", "seconds", "of sequential"], rows))
    print_footer(started)


if __name__ == "__main__":
    main()
