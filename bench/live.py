"""Live events: what storing events about work in progress while it runs costs.

Two measurements, on each backend, in one run:

1. **A chain that reports no progress** (trivial steps, ``linear N x 1`` as in
   ``overhead.py``): ms per step of longtask with live events (this code), of longtask with
   them off (``live_sink`` None: every event waits for the write after it, as before live
   events) and of the same graph written by hand in LangGraph on LangGraph's own saver. The
   variants alternate (the two longtask ones in turn first), each in a fresh database, and
   the median is shown. A fast step's
   ``step.started`` rides with its checkpoint (it waits ``LIVE_DELAY`` before it is stored
   on its own), so the two longtask columns should agree.
2. **A step that reports progress 100 times a second**: one step does a fixed amount of CPU
   work (about ``--work`` seconds, in slices of about 10 ms calibrated at the start),
   calling ``ctx.progress`` after each slice (or not at all), and returns the time its own
   work loop took. Three variants: no progress calls; 100 calls a
   second with longtask's rate limit (one ``step.progress`` stored per 0.5 s); and 100 calls
   a second each stored (the rate limit off: 100 events a second to the flusher). The
   overhead is the loop's time against the no-progress loop.

    python bench/live.py                     # SQLite and PostgreSQL
    python bench/live.py --quick             # small sizes
    python bench/live.py --backend sqlite
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    Backend,
    add_common_args,
    backends_of,
    print_footer,
    print_header,
    table,
)
from overhead import Shape, build_longtask, build_raw, run_raw_graph, trivial_result

from longtask import LongTask, Stage, function_step
from longtask.steps import _function

SLICE = 0.01


def chain_ms(backend: Backend, steps: int, reps: int) -> dict[str, float]:
    shape = Shape("linear", steps, 1)
    task = build_longtask(shape, trivial_result, "live_chain")
    times: dict[str, list[float]] = {"live on": [], "live off": [], "raw LangGraph": []}
    for rep in range(reps):
        # the order alternates, so that neither longtask variant always goes first
        order = list(times) if rep % 2 == 0 else ["live off", "live on", "raw LangGraph"]
        for variant in order:
            with backend.fresh("chain") as env:
                if variant == "raw LangGraph":
                    graph = build_raw(shape, trivial_result, env.raw_saver())
                    run_raw_graph(graph, "warm")
                    t0 = time.perf_counter()
                    run_raw_graph(graph, "t")
                else:
                    runner = env.runner()
                    if variant == "live off":
                        runner.db.events._live_sink = None
                    runner.start(task, thread_id="warm")
                    t0 = time.perf_counter()
                    runner.start(task, thread_id="t")
                times[variant].append((time.perf_counter() - t0) / steps * 1000)
    return {k: statistics.median(v) for k, v in times.items()}


def _busy(n: int) -> int:
    """A fixed amount of CPU work (not a deadline: the time it takes is what is measured)."""
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def _slice_size() -> int:
    """Iterations of ``_busy`` that take about SLICE seconds on this machine."""
    n = 10_000
    while True:
        t0 = time.perf_counter()
        _busy(n)
        took = time.perf_counter() - t0
        if took > 0.05:
            return max(1, int(n * SLICE / took))
        n *= 2


SLICE_SIZE = 0


def progress_task(work: float, report: bool) -> LongTask:
    slices = int(work / SLICE)
    size = SLICE_SIZE

    def crunch(ctx: Any) -> float:
        t0 = time.perf_counter()
        for i in range(slices):
            _busy(size)
            if report:
                ctx.progress(i + 1, slices, "crunching")
        return time.perf_counter() - t0

    return LongTask(f"progress_{report}", stages=[Stage("s", [function_step(crunch)])])


def progress_overhead(backend: Backend, work: float, reps: int) -> dict[str, tuple[float, int]]:
    """Per variant: the median time of the work loop (s) and the progress events stored."""
    variants = {
        "no progress calls": (False, _function.PROGRESS_INTERVAL),
        "100 calls/s, rate-limited": (True, _function.PROGRESS_INTERVAL),
        "100 calls/s, each stored": (True, 0.0),
    }
    out: dict[str, list[tuple[float, int]]] = {k: [] for k in variants}
    default = _function.PROGRESS_INTERVAL
    try:
        for _ in range(reps):
            for name, (report, interval) in variants.items():
                _function.PROGRESS_INTERVAL = interval
                with backend.fresh("progress") as env:
                    runner = env.runner()
                    thread = f"p-{uuid.uuid4().hex[:6]}"
                    runner.start(progress_task(work, report), thread_id=thread)
                    took = float(runner.results(thread)["crunch"])
                    stored = len(runner.events(thread, kinds=["step.progress"]))
                    out[name].append((took, stored))
    finally:
        _function.PROGRESS_INTERVAL = default
    return {
        k: (statistics.median(t for t, _ in v), int(statistics.median(n for _, n in v)))
        for k, v in out.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser)
    parser.add_argument("--steps", type=int, default=None, help="steps of the chain (200)")
    parser.add_argument("--work", type=float, default=None, help="seconds of work (5)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (5)")
    args = parser.parse_args()
    started = time.perf_counter()
    backends = backends_of(args)
    workdir = print_header(args, backends)
    steps = args.steps or (40 if args.quick else 200)
    work = args.work or (1.0 if args.quick else 5.0)
    reps = args.reps or (2 if args.quick else 5)
    global SLICE_SIZE
    SLICE_SIZE = _slice_size()
    for name in backends:
        backend = Backend(name, workdir, args.pg)
        chain = chain_ms(backend, steps, reps)
        raw = chain["raw LangGraph"]
        print(f"\n## {name}: a chain of {steps} trivial steps, no progress (median of {reps})")
        print(
            table(
                ["variant", "ms/step", "x raw LangGraph"],
                [[k, f"{v:.3f}", f"{v / raw:.2f}"] for k, v in chain.items()],
            )
        )
        on, off = chain["live on"], chain["live off"]
        print(f"live on / live off: {on / off:.3f}")
        heavy = progress_overhead(backend, work, reps)
        base = heavy["no progress calls"][0]
        print(f"\n## {name}: one step of {work:g} s of work in 10 ms slices (median of {reps})")
        print(
            table(
                ["variant", "work loop s", "overhead", "step.progress stored"],
                [
                    [k, f"{t:.3f}", f"{(t / base - 1) * 100:+.2f}%", str(n)]
                    for k, (t, n) in heavy.items()
                ],
            )
        )
    print_footer(started)


if __name__ == "__main__":
    main()
