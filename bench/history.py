"""Time travel on a long thread: ``Runner.history(limit=20)`` against LangGraph's own
``get_state_history`` on the same thread (which loads every checkpoint), and the other
time-travel reads, on SQLite and PostgreSQL.

    python bench/history.py                 # 2,000 checkpoints per backend (~1 min here)
    python bench/history.py --quick         # 300 checkpoints
    python bench/history.py --backend postgres --checkpoints 5000

A thread of a 40-step task is padded with forks of one checkpoint until it has the number
of checkpoints asked for (each fork writes one checkpoint with a ~2 KB result), so every
read below has a long history to skip. Times are medians of 5 reads; the ratio compares
with ``get_state_history`` (all checkpoints, the raw LangGraph way), read in the same run.
Nothing is asserted: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    Backend,
    add_common_args,
    backends_of,
    ms,
    payload_maker,
    print_footer,
    print_header,
    table,
    timed,
)

from longtask import LongTask, Stage, function_step

STEPS = 40


def _task(result: object) -> LongTask:
    return LongTask(
        "long",
        stages=[
            Stage(f"s{i}", [function_step(lambda ctx, i=i: result(i), name=f"n{i}")])  # type: ignore[operator]
            for i in range(STEPS)
        ],
    )


def measure(backend: Backend, total: int) -> list[list[str]]:
    name = backend.name
    rows = []
    with backend.fresh("history") as env:
        result, _marker = payload_maker(f"history-{name}")
        task = _task(result)
        runner = env.runner()
        thread = runner.start(task, thread_id="long")
        graph = runner.graph(task)
        head = runner.history(thread, 1)[0].checkpoint_id
        t0 = time.perf_counter()
        have = len(runner.db.store.checkpoint_tree(thread))
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": head}}
        while have < total:
            value = {"out.n0": runner.codec.encode(result(have))}
            graph.update_state(config, value, as_node="n0")
            have += 1
        print(f"  [{name}] {have} checkpoints written in {time.perf_counter() - t0:.1f} s")
        tree = runner.db.store.checkpoint_tree(thread)
        middle = tree[len(tree) // 2][0]

        def median(fn: object) -> float:
            return statistics.median(timed(fn) for _ in range(5))  # type: ignore[arg-type]

        everything = {"configurable": {"thread_id": thread}}
        raw = median(lambda: list(graph.get_state_history(everything)))
        reads = {
            "history(limit=20)": lambda: runner.history(thread, 20),
            "history(limit=20, step='n39')": lambda: runner.history(thread, 20, step="n39"),
            "at(middle checkpoint)": lambda: runner.at(thread, middle, task=task),
            "branches()": lambda: runner.branches(thread),
        }
        for label, fn in reads.items():
            t = median(fn)
            rows.append([name, str(have), label, ms(t), f"{t / raw:.4f}"])
        rows.append([name, str(have), "get_state_history (raw, all)", ms(raw), "1.0000"])
        runner.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser)
    parser.add_argument("--checkpoints", type=int, default=2000)
    args = parser.parse_args()
    total = 300 if args.quick else args.checkpoints
    started = time.perf_counter()
    backends = backends_of(args)
    workdir = print_header(args, backends)
    rows = []
    for name in backends:
        rows += measure(Backend(name, workdir, args.pg), total)
    print(f"\n## Reads on a thread of {total} checkpoints (median of 5)\n")
    print(table(["backend", "checkpoints", "read", "ms", "x raw get_state_history"], rows))
    print_footer(started)


if __name__ == "__main__":
    main()
