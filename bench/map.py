#!/usr/bin/env python
"""Map steps against a hand-written LangGraph ``Send`` fan-out: bytes and time per item.

    python bench/map.py                         # full run: 100 and 1000 items, both backends
    python bench/map.py --quick                 # smoke run (20 and 100 items, one run each)
    python bench/map.py --backend sqlite        # sqlite | postgres | all (default)
    python bench/map.py --pg postgresql://root@127.0.0.1:5432/test
    python bench/map.py --sizes 100,300,1000 --reps 5

The same work three ways, each with the same saver set-up and at most 8 items at a time: a
first step produces the items (the integers 0..n-1), then every item gets a ~2 KB JSON
result that differs per item.

- **longtask**: a ``LongTask`` with a function step ``items`` and a ``map_step`` ``work``
  (``max_parallel=8``), run with ``Runner.start``.
- **raw fan-out**: a ``StateGraph`` whose ``items`` node is followed by a conditional edge
  returning ``[Send("work", ...) for every item]``; ``work`` appends its result to a reducer
  channel (``Annotated[list, operator.add]``) and a ``collect`` node joins. All items run in
  one super-step (``max_concurrency=8``: at most 8 items at a time, as ``max_parallel=8``).
- **raw waves**: bounded parallelism written by hand: a ``dispatch`` node sends the next 8
  items, ``work`` appends to the same reducer channel and loops back to ``dispatch``.

Raw graphs run with ``graph.stream(..., durability="sync", stream_mode="updates")``, the way
the Runner drives its graph. For every backend, implementation and size: a fresh database,
the graph compiled first, one run whose storage is counted, then ``--reps`` timed runs (a
new thread each, distinct payloads); time per item = median of (run wall time / items).

This is a benchmark, not a test: it prints figures and never checks them against a target.
"""

from __future__ import annotations

import argparse
import functools
import math
import operator
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

from _common import (
    MARKER_STEP,
    PAYLOAD_CHARS,
    Backend,
    Env,
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
from langgraph.types import Command, Send

from longtask import ItemContext, LongTask, Runner, Stage, StepContext, function_step, map_step

WAVE = 8  # max_parallel of the map step, the wave size of the raw loop, max_concurrency
IMPLS = ("longtask", "raw fan-out", "raw waves")

# --------------------------------------------------------------------------------------------
# The work: n integer items, a ~2 KB result per item (the payload of overhead.py, part 3)
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _payloads(tag: str) -> tuple[Callable[[int], dict[str, Any]], bytes]:
    return payload_maker(tag)


def item_result(tag: str, i: int) -> dict[str, Any]:
    return _payloads(tag)[0](i)


def build_longtask() -> LongTask:
    def items(ctx: StepContext) -> list[int]:
        return list(range(int(ctx.inputs["n"])))

    def over(ctx: StepContext) -> list[int]:
        return list(ctx.result("items"))

    def work(ctx: ItemContext, item: int) -> dict[str, Any]:
        return item_result(ctx.inputs["tag"], item)

    return LongTask(
        name="bench_map",
        version="1",
        stages=[
            Stage("prepare", [function_step(items, name="items")]),
            Stage("map", [map_step(work, over=over, max_parallel=WAVE, name="work")]),
        ],
    )


class RawState(TypedDict, total=False):
    tag: str
    n: int
    items: list[int]
    next: int  # raw waves only: the first item of the next wave
    results: Annotated[list[dict[str, Any]], operator.add]
    count: int


def _items(state: RawState) -> dict[str, Any]:
    return {"items": list(range(state["n"]))}


def _work(payload: dict[str, Any]) -> dict[str, Any]:
    return {"results": [item_result(payload["tag"], payload["item"])]}


def _collect(state: RawState) -> dict[str, Any]:
    # The join. The result list is the reducer channel itself; writing it to another
    # channel would store it once more.
    return {"count": len(state["results"])}


def _send(state: RawState, i: int) -> Send:
    return Send("work", {"tag": state["tag"], "index": i, "item": state["items"][i]})


def build_raw_fanout(saver: BaseCheckpointSaver[Any]) -> Any:
    """The idiomatic fan-out: a conditional edge returning one Send per item."""

    def fan_out(state: RawState) -> list[Send]:
        return [_send(state, i) for i in range(len(state["items"]))]

    graph: StateGraph[Any, Any, Any, Any] = StateGraph(RawState)
    graph.add_node("items", _items)
    graph.add_node("work", _work)
    graph.add_node("collect", _collect)
    graph.add_edge(START, "items")
    graph.add_conditional_edges("items", fan_out, ["work"])
    graph.add_edge("work", "collect")
    graph.add_edge("collect", END)
    return graph.compile(checkpointer=saver)


def build_raw_waves(saver: BaseCheckpointSaver[Any]) -> Any:
    """Bounded parallelism by hand: a loop node sending WAVE items at a time."""

    def dispatch(state: RawState) -> Command[Any]:
        start, total = state.get("next", 0), len(state["items"])
        if start >= total:
            return Command(goto="collect")
        stop = min(total, start + WAVE)
        return Command(update={"next": stop}, goto=[_send(state, i) for i in range(start, stop)])

    graph: StateGraph[Any, Any, Any, Any] = StateGraph(RawState)
    graph.add_node("items", _items)
    graph.add_node("dispatch", dispatch, destinations=("work", "collect"))
    graph.add_node("work", _work)
    graph.add_node("collect", _collect)
    graph.add_edge(START, "items")
    graph.add_edge("items", "dispatch")
    graph.add_edge("work", "dispatch")
    graph.add_edge("collect", END)
    return graph.compile(checkpointer=saver)


def run_raw(graph: Any, thread_id: str, tag: str, n: int) -> None:
    config = {"configurable": {"thread_id": thread_id}, "max_concurrency": WAVE}
    stream = graph.stream({"tag": tag, "n": n}, config, durability="sync", stream_mode="updates")
    for _ in stream:
        pass


def check_results(
    what: str, results: list[dict[str, Any]], tag: str, n: int, *, ordered: bool
) -> None:
    """Sanity (not timing): every item's result, once each (in item order if ``ordered``)."""
    got = [r["step"] for r in results]
    if (got if ordered else sorted(got)) != list(range(n)) or any(
        r != item_result(tag, r["step"]) for r in results
    ):
        raise RuntimeError(f"{what}: {len(results)} results for {n} items, or wrong ones")


# --------------------------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------------------------


@dataclass
class MapRun:
    backend: str
    impl: str
    items: int
    storage: Storage
    seconds: list[float] = field(default_factory=list)  # wall time of each timed run
    first: float = 0.0  # wall time of the storage run (the first, cold)

    def per_item(self) -> list[float]:
        return [s / self.items for s in self.seconds]

    @property
    def median(self) -> float:
        return statistics.median(self.per_item())


def measure(backend: Backend, impl: str, n: int, reps: int) -> MapRun:
    label = impl.replace("raw ", "raw_").replace("-", "")
    with backend.fresh(f"map_{label}_{n}") as env:
        run_once, check = _driver(env, impl)
        storage = Storage()
        seconds = []
        # Run 0, the first on the fresh database, gives the storage; its time includes the
        # warm-up (pool connections, caches, the first blob reads), so runs 1..reps give
        # the time.
        for rep in range(reps + 1):
            tag = uuid.uuid4().hex[:10]
            tid = f"{label}-{n}-{rep}"
            seconds.append(timed(lambda: run_once(tid, tag, n)))  # noqa: B023
            check(tid, tag, n)
            if rep == 0:
                storage = env.storage(tid, _payloads(tag)[1])
        return MapRun(backend.name, impl, n, storage, seconds[1:], seconds[0])


Runs = Callable[[str, str, int], None]


def _driver(env: Env, impl: str) -> tuple[Runs, Runs]:
    """(run, check) for one implementation on one database, its graph compiled."""
    if impl == "longtask":
        runner: Runner = env.runner()
        task = build_longtask()
        runner.graph(task)  # compile outside the timing, as for the raw graphs

        def run_lt(tid: str, tag: str, n: int) -> None:
            runner.start(task, {"tag": tag, "n": n}, thread_id=tid)

        def check_lt(tid: str, tag: str, n: int) -> None:
            status = runner.status(tid)
            if status.status != "completed":
                raise RuntimeError(f"longtask thread {tid}: {status.status}")
            check_results(
                f"longtask thread {tid}", runner.result(tid, "work"), tag, n, ordered=True
            )

        return run_lt, check_lt
    saver = env.raw_saver()
    graph = build_raw_fanout(saver) if impl == "raw fan-out" else build_raw_waves(saver)

    def run(tid: str, tag: str, n: int) -> None:
        run_raw(graph, tid, tag, n)

    def check(tid: str, tag: str, n: int) -> None:
        snap = graph.get_state({"configurable": {"thread_id": tid}})
        if snap.next or snap.values.get("count") != n:
            raise RuntimeError(f"raw thread {tid}: next={snap.next}")
        check_results(f"raw thread {tid}", snap.values["results"], tag, n, ordered=False)

    return run, check


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def print_storage(runs: list[MapRun]) -> None:
    print(
        f"\n## 1. Storage per item: map of n items, ~{PAYLOAD_CHARS // 1000} KB result each "
        "(first run, fresh database; logical bytes)\n"
    )
    rows = []
    for r in runs:
        s = r.storage
        copies = sum(s.marker.values())
        where = ", ".join(f"{k} {v}" for k, v in sorted(s.marker.items()) if v)
        lt = r.impl == "longtask"
        rows.append(
            [
                r.backend,
                r.impl,
                str(r.items),
                human(s.total),
                f"{s.total / r.items:,.0f}",
                str(s.checkpoint_rows),
                human(s.checkpoints),
                human(s.values) if lt or r.backend == "postgres" else "-",
                human(s.writes),
                human(s.map_items) if lt else "-",
                human(s.lt_blobs) if lt else "-",
                f"{copies} ({where})" if copies else "0",
                f"{s.event_rows} / {human(s.events)}" if lt else "-",
            ]
        )
    print(
        table(
            [
                "backend",
                "impl",
                "items",
                "total",
                "bytes/item",
                "cp rows",
                "checkpoints",
                "values",
                "writes",
                "map_items",
                "lt_blobs",
                f"copies of item {MARKER_STEP}'s result",
                "events (in total)",
            ],
            rows,
        )
    )


def print_growth(runs: list[MapRun], sizes: list[int]) -> None:
    lo, hi = sizes[0], sizes[-1]
    print(
        f"\n## 2. Growth: bytes per item at {hi} items / at {lo} items "
        "(1.0 = linear storage; target for longtask: <= 1.2)\n"
    )
    keyed = {(r.backend, r.impl, r.items): r.storage.total for r in runs}
    rows = []
    for backend in dict.fromkeys(r.backend for r in runs):
        for impl in IMPLS:
            per = {n: keyed[(backend, impl, n)] / n for n in sizes if (backend, impl, n) in keyed}
            if not per:
                continue
            row = [backend, impl, *(f"{per[n]:,.0f}" if n in per else "-" for n in sizes)]
            if lo in per and hi in per:
                ratio = per[hi] / per[lo]
                k = 1 + math.log(ratio) / math.log(hi / lo)
                row += [f"{ratio:.2f}", f"{k:.2f}"]
            else:
                row += ["-", "-"]
            rows.append(row)
    print(
        table(
            [
                "backend",
                "impl",
                *(f"bytes/item @{n}" for n in sizes),
                f"ratio {hi}/{lo}",
                "k (total ~ n^k)",
            ],
            rows,
        )
    )


def print_times(runs: list[MapRun], sizes: list[int], reps: int) -> None:
    print(
        f"\n## 3. Time per item (median of {reps} run{'s' if reps > 1 else ''}; "
        "ms per item = run wall time / items)\n"
    )
    keyed = {(r.backend, r.impl, r.items): r for r in runs}
    rows = []
    for backend in dict.fromkeys(r.backend for r in runs):
        for n in sizes:
            got = {impl: keyed.get((backend, impl, n)) for impl in IMPLS}
            lt, fan, waves = (got[i] for i in IMPLS)
            row = [backend, str(n)]
            row += [ms(r.median) if r else "-" for r in (lt, fan, waves)]
            row += [
                f"{lt.median / other.median:.2f}" if lt and other else "-" for other in (fan, waves)
            ]
            row += [
                f"{ms(min(r.per_item()))}-{ms(max(r.per_item()))}" if r else "-"
                for r in (lt, fan, waves)
            ]
            rows.append(row)
    print(
        table(
            [
                "backend",
                "items",
                "longtask ms",
                "fan-out ms",
                "waves ms",
                "lt/fan-out",
                "lt/waves",
                "longtask range",
                "fan-out range",
                "waves range",
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
        "--sizes", default=None, help="comma-separated item counts (100,1000; 20,100 with --quick)"
    )
    parser.add_argument(
        "--reps", type=int, default=None, help="timed runs per case (5; 1 with --quick)"
    )
    args = parser.parse_args(argv)
    backends = backends_of(args)
    default_sizes = "20,100" if args.quick else "100,1000"
    sizes = sorted({int(x) for x in (args.sizes or default_sizes).split(",") if x.strip()})
    reps = args.reps or (1 if args.quick else 5)

    workdir = print_header(args, backends)
    started = time.perf_counter()
    runs: list[MapRun] = []
    try:
        for name in backends:
            backend = Backend(name, workdir, args.pg)
            for n in sizes:
                for impl in IMPLS:
                    t0 = time.perf_counter()
                    runs.append(measure(backend, impl, n, reps))
                    print(
                        f"  [{name}] {impl} {n} items in {time.perf_counter() - t0:.1f} s",
                        file=sys.stderr,
                    )
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    print_storage(runs)
    print_growth(runs, sizes)
    print_times(runs, sizes, reps)
    print_footer(started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
