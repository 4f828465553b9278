#!/usr/bin/env python
"""A graph step's inner super-steps against the same graph on raw LangGraph: time per step.

    python bench/graph_step.py                  # full run: 20 and 200 nodes, both backends
    python bench/graph_step.py --quick          # smoke run (10 nodes, 2 runs each)
    python bench/graph_step.py --backend sqlite # sqlite | postgres | all (default)
    python bench/graph_step.py --sizes 50,500 --reps 7

The same LangGraph graph both ways: a chain of n nodes, each adding ~2 KB of JSON to its
own state key (a new key per node, as a task's steps write their own channels).

- **graph step**: a ``LongTask`` with one ``graph_step`` over the graph, run with
  ``Runner.start``; the graph runs as the step node's subgraph on longtask's saver, one
  checkpoint per inner super-step (plus the task's own few).
- **raw**: the graph compiled with LangGraph's ``SqliteSaver``/``PostgresSaver`` (set up as
  longtask sets up its connections) and run with ``graph.stream(..., durability="sync")``.

For every backend and size: a fresh database, the graphs compiled first, then ``--reps``
timed runs (a new thread each); time per inner super-step = median of (wall time / n).
The ratio is graph step / raw, in the same run. A benchmark, not a test: it prints figures
and never checks them against a target.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
import uuid
from typing import Any

from _common import (
    PAYLOAD_CHARS,
    Backend,
    add_common_args,
    backends_of,
    ms,
    print_footer,
    print_header,
    table,
    timed,
)
from langgraph.graph import END, START, StateGraph

from longtask import LongTask, Stage, graph_step


def chain(n: int) -> StateGraph[Any, Any, Any, Any]:
    """n nodes in a row; node i writes ~2 KB under its own key ``k{i}``."""
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(dict)

    def node(i: int) -> Any:
        def run(state: dict[str, Any]) -> dict[str, Any]:
            return {f"k{i}": {"i": i, "text": (f"{i}-" * PAYLOAD_CHARS)[:PAYLOAD_CHARS]}}

        run.__name__ = f"n{i}"
        return run

    for i in range(n):
        builder.add_node(f"n{i}", node(i))
    builder.add_edge(START, "n0")
    for i in range(n - 1):
        builder.add_edge(f"n{i}", f"n{i + 1}")
    builder.add_edge(f"n{n - 1}", END)
    return builder


def measure(backend: Backend, n: int, reps: int) -> tuple[float, float]:
    """Median seconds per inner super-step: (graph step, raw)."""
    builder = chain(n)
    task = LongTask(
        f"bench-graph-{n}",
        stages=[Stage("s", [graph_step("g", builder, input=lambda ctx: {}, output=lambda s: 0)])],
    )
    with backend.fresh(f"gs{n}") as env:
        runner = env.runner()
        runner.graph(task)  # compile outside the timing, as the raw graph is
        ours = [
            timed(lambda: runner.start(task, thread_id=f"gs-{uuid.uuid4().hex[:8]}")) / n
            for _ in range(reps)
        ]
    with backend.fresh(f"raw{n}") as env:
        graph = builder.compile(checkpointer=env.raw_saver())

        def raw() -> None:
            config = {"configurable": {"thread_id": f"raw-{uuid.uuid4().hex[:8]}"}}
            for _ in graph.stream({}, config, durability="sync", stream_mode="updates"):
                pass

        theirs = [timed(raw) / n for _ in range(reps)]
    return statistics.median(ours), statistics.median(theirs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser)
    parser.add_argument("--sizes", default=None, help="node counts (20,200; 10 with --quick)")
    parser.add_argument("--reps", type=int, default=None, help="timed runs (5; 2 with --quick)")
    args = parser.parse_args(argv)
    backends = backends_of(args)
    sizes = sorted({int(x) for x in (args.sizes or ("10" if args.quick else "20,200")).split(",")})
    reps = args.reps or (2 if args.quick else 5)
    workdir = print_header(args, backends)
    started = time.perf_counter()
    rows = []
    try:
        for name in backends:
            backend = Backend(name, workdir, args.pg)
            for n in sizes:
                t0 = time.perf_counter()
                ours, theirs = measure(backend, n, reps)
                rows.append([name, str(n), ms(ours), ms(theirs), f"{ours / theirs:.2f}"])
                print(f"  [{name}] {n} nodes in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"\ntime per inner super-step (median of {reps} runs; ratio = graph step / raw)")
    print(table(["backend", "nodes", "graph step", "raw LangGraph", "ratio"], rows))
    print_footer(started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
