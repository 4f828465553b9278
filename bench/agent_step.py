#!/usr/bin/env python
"""An agent graph step against the same agent graph on raw LangGraph: time per run.

    python bench/agent_step.py                    # PostgreSQL and SQLite, 20 runs a side
    python bench/agent_step.py --quick            # smoke run (3 runs a side)
    python bench/agent_step.py --backend postgres --runs 60 --turns 3,5,9

The graph is LangChain's ``create_agent`` over ``ChatOpenAI`` and two tools, talking to the
scripted OpenAI-compatible server of ``tests/fakes`` on 127.0.0.1 (no network): ``--turns``
model calls a run (each but the last asking for tools, two of them on the first), measured
at each size given, so that the cost of one more model call (what accounting adds per call)
is told apart from the cost of a run (a thread's record, lease, end).

- **graph step**: a ``LongTask`` with one ``graph_step`` over the agent, run with
  ``Runner.start`` (a new thread per run): the agent's super-steps checkpointed on
  longtask's saver, its model calls recorded as ``model.call`` events and charged to the
  thread's budget and the step's usage.
- **raw**: the same agent compiled with LangGraph's ``PostgresSaver``/``SqliteSaver`` (set
  up as longtask sets up its connections), run with ``graph.invoke(...,
  durability="sync")`` on a new thread per run.

The two sides alternate run by run (after a warm-up run each), in one process, against one
server, so the machine's drift touches both alike. Printed: the median ms per run of each
side, the ratio of the medians and the median of the paired ratios (run i of one side over
run i of the other). A benchmark, not a test: it prints figures and checks none.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from _common import Backend, add_common_args, backends_of, ms, print_footer, print_header, table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fakes import FakeOpenAI, Reply, by_turn, openai_server
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from longtask import LongTask, Stage, graph_step


@tool
def look(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def script(turns: int) -> Any:
    """``turns`` model calls: each but the last asks for tools (two on the first)."""
    first = Reply.tool_calls([("look", {"topic": "graphs"}), ("add", {"a": 1, "b": 2})])
    more = [Reply.tool_calls([("look", {"topic": f"savers {i}"})]) for i in range(turns - 2)]
    return by_turn([first, *more, Reply.text("graphs are saved by savers; 1 + 2 = 3")])


# The fake server sends a response's headers and body in two writes: with Nagle's algorithm
# on, the body waits for the client's delayed ACK (~40 ms a call here), which would drown
# what is measured in the network stack's timers.
openai_server._Handler.disable_nagle_algorithm = True


def agent(base_url: str, checkpointer: Any = None) -> Any:
    llm = ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="sk-bench", max_retries=0)
    return create_agent(llm, [look, add], checkpointer=checkpointer)


def _question(ctx: Any = None) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "What saves graphs? And 1 + 2?"}]}


def measure(backend: Backend, base_url: str, runs: int) -> tuple[list[float], list[float]]:
    """Seconds per run, each side: (graph step, raw), alternating."""
    task = LongTask(
        "bench-agent",
        stages=[
            Stage(
                "s",
                [
                    graph_step(
                        "research",
                        agent(base_url),
                        input=_question,
                        output=lambda s: s["messages"][-1].content,
                    )
                ],
            )
        ],
    )
    with contextlib.ExitStack() as stack:
        ours_env = stack.enter_context(backend.fresh("agent"))
        raw_env = stack.enter_context(backend.fresh("agentraw"))
        runner = ours_env.runner()
        runner.graph(task)
        raw_graph = agent(base_url, raw_env.raw_saver())

        started: list[str] = []

        def ours() -> None:
            # checked after the timed runs: reading a thread's status is no part of a run
            started.append(runner.start(task, thread_id=f"a-{uuid.uuid4().hex[:8]}"))

        def raw() -> None:
            config = {"configurable": {"thread_id": f"r-{uuid.uuid4().hex[:8]}"}}
            out = raw_graph.invoke(_question(), config, durability="sync")
            if "1 + 2 = 3" not in out["messages"][-1].content:
                raise RuntimeError("the raw agent did not finish")

        ours()  # warm-up: pool connections, compiled graphs, imports
        raw()
        a: list[float] = []
        b: list[float] = []
        for i in range(runs):
            for side, fn, into in (("ours", ours, a), ("raw", raw, b))[:: 1 if i % 2 else -1]:
                del side
                t0 = time.perf_counter()
                fn()
                into.append(time.perf_counter() - t0)
        for thread in started:
            status = runner.status(thread).status
            if status != "completed":
                raise RuntimeError(f"the graph step of thread {thread} ended {status}")
        return a, b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser)
    parser.add_argument("--runs", type=int, default=None, help="timed runs a side (20; 3 quick)")
    parser.add_argument("--turns", default="3,9", help="model calls per run, each size (3,9)")
    args = parser.parse_args(argv)
    backends = backends_of(args)
    runs = args.runs or (3 if args.quick else 20)
    sizes = sorted({int(x) for x in args.turns.split(",")})
    if sizes[0] < 2:
        parser.error("--turns: at least 2 model calls a run (tools, then the answer)")
    workdir = print_header(args, backends)
    started = time.perf_counter()
    rows = []
    try:
        for name in backends:
            medians: list[tuple[int, float, float]] = []
            for turns in sizes:
                t0 = time.perf_counter()
                with FakeOpenAI(script(turns)) as server:
                    ours, raw = measure(Backend(name, workdir, args.pg), server.base_url, runs)
                mo, mr = statistics.median(ours), statistics.median(raw)
                medians.append((turns, mo, mr))
                paired = statistics.median(o / r for o, r in zip(ours, raw, strict=True))
                rows.append(
                    [
                        name,
                        str(turns),
                        ms(mo),
                        ms(mr),
                        ms(mo - mr),
                        f"{mo / mr:.2f}",
                        f"{paired:.2f}",
                    ]
                )
                print(
                    f"  [{name}] {turns} turns, {runs} runs a side: "
                    f"{time.perf_counter() - t0:.1f} s",
                    file=sys.stderr,
                )
            if len(medians) > 1:
                (n0, o0, r0), (n1, o1, r1) = medians[0], medians[-1]
                per_o, per_r = (o1 - o0) / (n1 - n0), (r1 - r0) / (n1 - n0)
                ratio = f"{per_o / per_r:.2f}"
                rows.append([name, "per call", ms(per_o), ms(per_r), ms(per_o - per_r), ratio, ""])
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"\nms per agent run (median of {runs} runs a side, alternating; ratio = graph step / "
        "raw; paired = median of run-by-run ratios). 'per call': the cost of one more model "
        f"call (and its tool call), from {sizes[0]} to {sizes[-1]} turns"
    )
    print(
        table(
            ["backend", "turns", "graph step", "raw LangGraph", "extra", "ratio", "paired"],
            rows,
        )
    )
    print_footer(started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
