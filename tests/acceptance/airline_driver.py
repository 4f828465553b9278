"""Crash driver for the airline agent (``airline_agent.py``, unchanged): SIGKILL the process
that runs it at random points, many times, resuming each thread until it is done; then
check every tool call against the airline's database and longtask's store.

Run by ``test_airline_crash.py`` as a subprocess, with the scripted model's URL in
``$OPENAI_BASE_URL`` (the model server lives in the test's process: the driver runs no
thread of its own, so forking is safe)::

    python airline_driver.py --db URL --airline PATH --plan step:20,serve:8 [--seed N]

It imports longtask and the agent once; every process it kills is an ``os.fork()``ed
child that opens its own database connections after the fork (as ``chaos_driver.py``'s
children do). The plan says how many kills each mode gets, in order:

- ``step``: the child starts or resumes a thread of ``airline_task.task`` (the agent as a
  graph step, its tools marked in ``graph_step(tools=...)``) with a ``Runner``;
- ``serve``: the child is ``longtask serve --config langgraph.json`` (the agent served as
  a plain LangGraph graph, its tools marked in the entry's ``"tools"``; see
  :func:`served_config`); the driver starts each thread's run with the LangGraph SDK,
  and after a kill starts serve again, which carries the run on.

Every other thread runs the agent whose tools are coroutines (``airline_task.atask``, the
served ``airline_async``; LangGraph's async API), the others the agent whose tools are
plain functions.

A run is killed a random delay after it is ready (uniform over 1.1 times the length of the
first thread's run, which is never killed), unless it finished before; a quarter of the
runs are instead killed as soon as they committed a tool call in the airline's database
(during the tool's nap before it returns), and so is every run from half-way through a
mode's kills as long as no kill landed in that window. The writing tools nap
``$AIRLINE_NAP`` seconds before their write and after their commit, which widens the
windows in which a kill leaves a call ``started`` in longtask's ledger. After each kill the
driver tells where it landed:

- ``commit_to_return``: a tool call the killed process committed in the airline's
  database is ``started`` in the ledger (done outside, unknown inside: the reconciler must
  find it);
- ``in_tool``: a call is ``started`` in the ledger with no commit from the killed process
  (the reconciler finds nothing: called again);
- ``after_graph_end``: the graph's end is checkpointed, the thread's is not recorded yet
  (``status`` says completed, the record running: a resume records the end);
- ``elsewhere``: no tool call was cut off (the model's call, checkpoints, start-up).

The first thread runs without kills: every other thread must leave the same outside state
(bookings, refunds, logged tool calls; the passenger's name aside) and the same result. No
tool call id may be in the airline's database twice, no thread may pause, and every call
killed between its commit and its return must have been reconciled. Prints the figures of
each mode as a JSON list on one line on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import select
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import airline_agent

HERE = Path(__file__).resolve().parent

#: alice's token for serve
TOKEN = "tok-airline-crash"
#: the served graphs by agent: its tools plain functions, or coroutines
GRAPH_IDS = {"sync": "airline", "async": "airline_async"}
#: how long a child waits for a killed predecessor's lock (PostgreSQL notices the dead
#: connection a moment after the kill)
BUSY_WAIT = 15.0
CHILD_TIMEOUT = 90.0
DEBUG = bool(os.environ.get("LT_CHAOS_DEBUG"))
#: a run is killed after a random delay, or (AIMED) as soon as it committed a tool call,
#: during the tool's nap before it returns: a share of the runs, and every run from half-way
#: through a mode's kills until one landed there, so that every run of the harness has
#: kills in that window however the delays fall
AIMED = "commit"
AIM_SHARE = 0.25
Kill = float | str | None
#: how often the driver looks at a run it waits to kill
POLL = 0.005
#: what ``longtask serve`` imports as it starts (MCP's types alone take seconds), imported
#: once before the serve children are forked
SERVE_MODULES = (
    "longtask.serve",
    "longtask.serve._app",
    "mcp",
    "mcp.client",
    "mcp.server",
    "prometheus_client",
    "prometheus_client.asgi",
    "sse_starlette",
    "starlette.authentication",
    "uvicorn",
    "uvicorn.main",
    "uvicorn.lifespan.on",
    "uvicorn.loops.auto",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.websockets.auto",
)


def served_config() -> dict[str, Any]:
    """The ``langgraph.json`` serve is given: the agent of ``airline_agent.py`` with its
    tools' marks in its entry (a reconciler by file reference), and the agent with
    coroutine tools, whose tools carry their marks in their metadata
    (``airline_served.py``)."""
    reconcile = f"{HERE / 'airline_task.py'}:reconcile"
    return {
        "graphs": {
            GRAPH_IDS["sync"]: {
                "path": f"{HERE / 'airline_agent.py'}:graph",
                "tools": {
                    "lookup": "read_only",
                    "book_flight": reconcile,
                    "cancel_booking": reconcile,
                },
            },
            GRAPH_IDS["async"]: f"{HERE / 'airline_served.py'}:async_graph",
        }
    }


def outside_state(path: str | Path, passenger: str) -> dict[str, Any]:
    """What the airline holds of ``passenger``'s trip, with the name replaced by ``P`` (so
    two threads' trips compare equal)."""
    conn = airline_agent.connect(path)
    try:

        def rows(sql: str) -> list[list[Any]]:
            found = conn.execute(sql, (passenger,)).fetchall()
            return sorted(
                [str(v).replace(passenger, "P") if isinstance(v, str) else v for v in row]
                for row in found
            )

        return {
            "bookings": rows(
                "SELECT ref, passenger, flight, status FROM bookings WHERE passenger = ?"
            ),
            "refunds": rows("SELECT r.ref, r.amount FROM refunds r WHERE r.ref LIKE ? || '/%'"),
            "tool_calls": rows("SELECT tool, result FROM tool_calls WHERE passenger = ?"),
        }
    finally:
        conn.close()


def duplicates(path: str | Path) -> list[tuple[str, int]]:
    """Tool call ids the airline committed more than once."""
    conn = airline_agent.connect(path)
    try:
        return [
            (str(i), int(n))
            for i, n in conn.execute(
                "SELECT tool_call_id, count(*) FROM tool_calls GROUP BY tool_call_id "
                "HAVING count(*) > 1"
            )
        ]
    finally:
        conn.close()


def _commits(path: str, pid: int) -> set[str]:
    conn = airline_agent.connect(path)
    try:
        rows = conn.execute("SELECT tool_call_id FROM tool_calls WHERE pid = ?", (pid,))
        return {str(r[0]) for r in rows}
    finally:
        conn.close()


def _status(runner: Any, thread: str) -> str | None:
    """The thread's status, None if it does not exist yet. "completed" only once its record
    says so: a process killed after the graph's last checkpoint and before it recorded the
    thread's end leaves a thread that ``status`` (told by the checkpoint) calls completed,
    whose end (its record, ``longtask.completed``) a resume records."""
    rec = runner.db.store.get_thread(thread)
    if rec is None:
        return None
    status = str(runner.status(thread).status)
    return str(rec.status) if status == "completed" else status


# -- children -------------------------------------------------------------------------------


def _fork(body: Any) -> tuple[int, int]:
    """A child running ``body(wfd)`` (it never returns); the read end of its pipe."""
    rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        code = 1
        try:
            body(wfd)
            code = 0
        except BaseException as exc:
            report = {"error": f"{type(exc).__name__}: {exc}", "tb": traceback.format_exc()}
            with contextlib.suppress(OSError):
                os.write(wfd, (json.dumps(report) + "\n").encode())
        finally:
            os._exit(code)
    os.close(wfd)
    return pid, rfd


def _step_child(db: str, thread: str, passenger: str, agent: str, wfd: int) -> None:
    """Start or resume ``thread`` (writing "R" once a killed predecessor's lock is gone),
    then report its status."""
    import airline_task

    from longtask import Runner
    from longtask.errors import ThreadBusy, ThreadNotFound

    task = airline_task.atask if agent == "async" else airline_task.task
    with Runner(db) as runner:
        deadline = time.monotonic() + BUSY_WAIT
        while time.monotonic() < deadline:
            try:
                if not runner.status(thread).active:
                    break
            except ThreadNotFound:
                break
            time.sleep(0.01)
        os.write(wfd, b"R\n")
        ready = time.monotonic()
        while True:
            try:
                try:
                    runner.status(thread)
                except ThreadNotFound:
                    runner.start(task, {"passenger": passenger}, thread_id=thread)
                else:
                    runner.resume(thread, task=task)
                break
            except ThreadBusy:
                # the lock of a killed process, not noticed yet by the server
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        status = _status(runner, thread)
    report = {"status": status, "took": round(time.monotonic() - ready, 3)}
    os.write(wfd, (json.dumps(report) + "\n").encode())


def _serve_child(db: str, config: Path, port: int, wfd: int) -> None:
    """``longtask serve --config CONFIG`` in this (forked) process."""
    import ctypes

    from longtask.cli import main

    # killed with the driver, whatever ends it (PR_SET_PDEATHSIG)
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)

    sys.argv = ["longtask", "serve", "--port", str(port), "--db", db, "--config", str(config)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    if not DEBUG:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    main()


def _kill(pid: int) -> bool:
    """SIGKILL ``pid`` and reap it; True if the signal killed it (not an earlier exit)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


# -- the driver ------------------------------------------------------------------------------


class Driver:
    """Kills ``kills`` runs of the agent in ``mode`` (step or serve)."""

    def __init__(self, mode: str, kills: int, args: argparse.Namespace) -> None:
        self.mode = mode
        self.db: str = args.db
        self.airline: str = args.airline
        self.target = kills
        self.rng = random.Random(f"{args.seed}-{mode}")
        self.seed: int = args.seed
        self.budget: float = args.budget
        self.started = time.monotonic()
        self.prefix = f"air-{self.mode}-{args.seed}"
        self.threads: list[str] = []
        #: the agent each thread runs: "sync" or "async" (tools that are coroutines)
        self.agents: dict[str, str] = {}
        self.runs = 0
        self.kills = 0
        self.finished_before_kill = 0
        self.aimed = 0
        self.phases: Counter[str] = Counter()
        #: ledger keys of calls killed between their commit and their return
        self.committed_cut: set[str] = set()
        self.errors: list[str] = []
        self.violations: list[str] = []
        self.ref_seconds = 0.0
        self.serve_starts = 0
        self.server: int | None = None
        self.port = 0
        self.config = Path(args.airline).with_name("langgraph.json")

    # -- looking -----------------------------------------------------------------------------

    def _ledger(self, thread: str) -> tuple[dict[str, str], dict[str, str], str | None]:
        """The thread's ledger (key -> status), its tool call ids (key -> id) and status."""
        from longtask import Runner

        with Runner(self.db) as runner:
            status = _status(runner, thread)
            if status is None:
                return {}, {}, None
            rows = {e.key: e.status for e in runner.effects(thread)}
            ids = {
                str(e.data["key"]): str(e.data.get("tool_call_id"))
                for e in runner.events(thread, kinds=["effect.started"])
            }
        return rows, ids, status

    def _classify(self, thread: str, before: dict[str, str], pid: int) -> str:
        from longtask import Runner

        rows, ids, status = self._ledger(thread)
        cut = [k for k, s in rows.items() if s == "started" and before.get(k) != "started"]
        committed = _commits(self.airline, pid)
        done_outside = [k for k in cut if ids.get(k) in committed]
        self.committed_cut.update(done_outside)
        phase = "commit_to_return" if done_outside else "in_tool" if cut else "elsewhere"
        if phase == "elsewhere" and status == "running":
            with Runner(self.db) as runner:
                if runner.status(thread).status == "completed":
                    # the graph's end is checkpointed, not yet recorded
                    phase = "after_graph_end"
        self.phases[phase] += 1
        return phase

    # -- one run -----------------------------------------------------------------------------

    def _due(self, kill: Kill, since: float, pid: int, commits: int) -> bool:
        """Whether to kill ``pid`` now: ``kill`` seconds after ``since``, or (``"commit"``)
        as soon as it committed a tool call beyond its first ``commits``."""
        if kill is None:
            return False
        if kill == AIMED:
            return len(_commits(self.airline, pid)) > commits
        return time.monotonic() - since >= float(kill)

    def _wait(self, rfd: int, pid: int, kill: Kill) -> tuple[bool, dict[str, Any]]:
        """Read a step child's pipe, killing it when ``kill`` says (counted from its
        "ready"). (killed, its report)."""
        buf, ready_at, report = b"", None, None
        deadline = time.monotonic() + CHILD_TIMEOUT
        try:
            while report is None:
                now = time.monotonic()
                if now > deadline:
                    self.errors.append(f"child {pid} did not finish in {CHILD_TIMEOUT} s")
                    break
                if ready_at is not None and self._due(kill, ready_at, pid, 0):
                    break
                timeout = deadline - now
                if ready_at is not None and kill is not None:
                    timeout = POLL if kill == AIMED else ready_at + float(kill) - now
                readable, _, _ = select.select([rfd], [], [], max(0.0, timeout))
                if not readable:
                    continue
                chunk = os.read(rfd, 65536)
                if not chunk:
                    break
                buf += chunk
                lines = buf.split(b"\n")
                if ready_at is None and b"R" in lines[:-1]:
                    ready_at = time.monotonic()
                found = [ln for ln in lines[:-1] if ln.startswith(b"{")]
                report = json.loads(found[0]) if found else None
        finally:
            os.close(rfd)
        if report is not None:
            os.waitpid(pid, 0)
            return False, report
        return _kill(pid), {}

    def _killed(self, thread: str, kill: Kill, before: dict[str, str], pid: int) -> None:
        self.kills += 1
        if kill == AIMED:
            self.aimed += 1
        phase = self._classify(thread, before, pid)
        if DEBUG:
            print(f"{thread} killed ({kill}): {phase}", file=sys.stderr)

    def _step_run(self, thread: str, passenger: str, kill: Kill) -> str | None:
        before, _, _ = self._ledger(thread)
        agent = self.agents[thread]
        pid, rfd = _fork(lambda wfd: _step_child(self.db, thread, passenger, agent, wfd))
        killed, report = self._wait(rfd, pid, kill)
        self.runs += 1
        if killed:
            self._killed(thread, kill, before, pid)
            return None
        if DEBUG:
            print(f"{thread} ran to {report.get('status')} ({report})", file=sys.stderr)
        if kill is None and not self.ref_seconds:
            self.ref_seconds = float(report.get("took") or 1.0)
        if kill is not None:
            self.finished_before_kill += 1
        if "error" in report:
            self.errors.append(f"{thread}: {report['error']}\n{report.get('tb', '')[-3000:]}")
        return str(report.get("status"))

    # -- serve -------------------------------------------------------------------------------

    def _serve(self) -> None:
        """Start serve (a forked child) and wait until it answers."""
        import httpx

        self.port = self.port or _free_port()
        pid, rfd = _fork(lambda wfd: _serve_child(self.db, self.config, self.port, wfd))
        os.close(rfd)
        self.server = pid
        self.serve_starts += 1
        deadline = time.monotonic() + 60
        while True:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                self.server = None
                raise RuntimeError("longtask serve exited at start")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{self.port}/ok", timeout=1).status_code == 200:
                    if DEBUG:
                        took = time.monotonic() - deadline + 60
                        print(f"serve started in {took:.3f} s", file=sys.stderr)
                    return
            if time.monotonic() > deadline:
                raise RuntimeError("longtask serve did not answer within 60 s")
            time.sleep(0.02)

    def _client(self) -> Any:
        from langgraph_sdk import get_sync_client

        return get_sync_client(url=f"http://127.0.0.1:{self.port}", api_key=TOKEN)

    def _serve_run(self, thread: str, passenger: str, kill: Kill) -> str | None:
        """One stretch of a served thread: its run is created on the first, carried on by
        a restarted serve on the others."""
        import airline_task

        from longtask import Runner

        before, _, status = self._ledger(thread)
        if self.server is None:
            self._serve()
        if status is None:
            with self._client() as lg:
                lg.threads.create(thread_id=thread)
                graph_id = GRAPH_IDS[self.agents[thread]]
                lg.runs.create(thread, graph_id, input=airline_task.ask(passenger))
        assert self.server is not None
        pid = self.server
        t0, commits = time.monotonic(), len(_commits(self.airline, pid))
        deadline = t0 + CHILD_TIMEOUT
        self.runs += 1
        # closed before the next fork (of a serve)
        with Runner(self.db) as runner:
            while True:
                # None: the run's thread is made as the run starts
                status = _status(runner, thread) or "pending"
                if status not in ("pending", "running"):
                    break
                if self._due(kill, t0, pid, commits):
                    break
                if time.monotonic() > deadline:
                    self.errors.append(f"{thread}: still {status} after {CHILD_TIMEOUT} s")
                    return status
                time.sleep(POLL)
        if status in ("pending", "running"):
            self.server = None
            if _kill(pid):
                self._killed(thread, kill, before, pid)
            else:
                self.errors.append("serve exited before it was killed")
            return None
        if kill is None and not self.ref_seconds:
            self.ref_seconds = time.monotonic() - t0
        if kill is not None:
            self.finished_before_kill += 1
        return status

    # -- the loop ----------------------------------------------------------------------------

    def _run(self, thread: str, passenger: str, kill: Kill) -> str | None:
        if self.mode == "serve":
            return self._serve_run(thread, passenger, kill)
        return self._step_run(thread, passenger, kill)

    def _thread(self, kill: bool) -> str:
        """Drive a new thread to its end (killing its runs while kills are wanted). A
        thread is a passenger's trip, named as the thread: the name is in the model's
        prompt and in the tools' arguments, so each thread's tool calls (and the model's
        tool call ids) are its own."""
        thread = f"{self.prefix}-{len(self.threads)}"
        self.threads.append(thread)
        # every other thread runs the agent whose tools are coroutines
        self.agents[thread] = "async" if len(self.threads) % 2 == 0 else "sync"
        for _ in range(200):
            when: Kill = None
            if kill and self.kills < self.target:
                # aimed at random, and from half-way through the kills until one landed
                # after a commit (a short run's random delays may miss the window)
                missed = not self.phases["commit_to_return"] and self.kills >= self.target // 2
                if missed or self.rng.random() < AIM_SHARE:
                    when = AIMED
                else:
                    when = self.rng.uniform(0.0, 1.1 * self.ref_seconds)
            status = self._run(thread, thread, when)
            if status is None:  # killed: where did it leave the thread?
                status = self._ledger(thread)[2]
            if status == "completed":
                return thread
            if status in ("waiting_user", "failed"):
                rows, _, _ = self._ledger(thread)
                self.violations.append(f"{thread} is {status} (ledger: {rows})")
                return thread
        self.errors.append(f"{thread} did not complete")
        return thread

    def run(self) -> dict[str, Any]:
        if self.mode == "serve":
            self.config.write_text(json.dumps(served_config()))
        try:
            ref = self._thread(kill=False)
            while self.kills < self.target:
                if time.monotonic() - self.started > self.budget:
                    self.errors.append(
                        f"time budget of {self.budget} s spent after {self.kills} kills"
                    )
                    break
                self._thread(kill=True)
        finally:
            if self.server is not None:
                _kill(self.server)
                self.server = None
        return self.figures(ref)

    def figures(self, ref: str) -> dict[str, Any]:
        from longtask import Runner

        expected = outside_state(self.airline, ref)
        results: dict[str, Any] = {}
        reconciled: set[str] = set()
        starts: Counter[str] = Counter()
        pauses = 0
        with Runner(self.db) as runner:
            for thread in self.threads:
                status = _status(runner, thread)
                ended = runner.events(thread, kinds=["longtask.completed"])
                if status != "completed" or len(ended) != 1:
                    self.violations.append(f"{thread} ended {status}, {len(ended)} completions")
                    continue
                if outside_state(self.airline, thread) != expected:
                    self.violations.append(
                        f"{thread}: airline state {outside_state(self.airline, thread)} "
                        f"differs from the run without kills: {expected}"
                    )
                step = runner.status(thread).steps[0].name
                results[thread] = _final(runner.result(thread, step)).replace(thread, "P")
                for e in runner.events(thread, kinds=["effect.started", "effect.succeeded"]):
                    if e.kind == "effect.started":
                        starts[str(e.data["key"])] += 1
                    elif e.data.get("reconciled"):
                        reconciled.add(str(e.data["key"]))
                pauses += len(runner.events(thread, kinds=["effect.unknown"]))
        if set(results.values()) != {results.get(ref)}:
            self.violations.append(f"results differ: {sorted(set(results.values()))}")
        if pauses:
            self.violations.append(f"{pauses} effect pauses (every writing tool is reconciled)")
        dups = duplicates(self.airline)
        if dups:
            self.violations.append(f"tool calls committed more than once: {dups}")
        if self.committed_cut - reconciled:
            self.violations.append(
                f"calls killed after their commit and never reconciled: "
                f"{sorted(self.committed_cut - reconciled)}"
            )
        return {
            "mode": self.mode,
            "backend": "postgres" if self.db.startswith("postgres") else "sqlite",
            "seed": self.seed,
            "kills": self.kills,
            "kills_by_phase": dict(sorted(self.phases.items())),
            "aimed_kills": self.aimed,
            "reconciled": len(reconciled),
            # cut off before their commit: the reconciler found nothing, called again
            "called_again": sum(n - 1 for n in starts.values()),
            "runs": self.runs,
            "finished_before_kill": self.finished_before_kill,
            "threads": len(self.threads),
            "threads_async": sum(a == "async" for a in self.agents.values()),
            "completed": len(results),
            "duplicates": len(dups),
            "serve_starts": self.serve_starts,
            "run_without_kills_s": round(self.ref_seconds, 3),
            "result": results.get(ref),
            "errors": self.errors,
            "violations": self.violations,
            "duration_s": round(time.monotonic() - self.started, 2),
        }


def _final(result: Any) -> str:
    """The agent's last message: the graph step's result, or the last of a served graph's
    messages (its result is the graph's state)."""
    if isinstance(result, dict) and "messages" in result:
        last = result["messages"][-1]
        return str(last.get("data", last).get("content"))
    return str(result)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help="kills per mode, in order: step:N,serve:N")
    parser.add_argument("--db", required=True)
    parser.add_argument("--airline", required=True, help="the airline's SQLite file")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds for each mode's kills")
    args = parser.parse_args(argv)
    plan = [(m, int(n)) for m, _, n in (part.partition(":") for part in args.plan.split(","))]
    if not plan or any(m not in ("step", "serve") for m, _ in plan):
        parser.error(f"--plan {args.plan!r}: give step:N and/or serve:N, comma-separated")
    os.environ[airline_agent.DB_ENV] = args.airline
    os.environ.setdefault(airline_agent.NAP_ENV, "0.05")
    os.environ["LONGTASK_API_TOKENS"] = f"alice={TOKEN}"
    os.environ.pop("LONGTASK_API_TOKEN", None)
    # imported before any fork, so that no child pays for it
    import importlib

    import airline_task  # noqa: F401

    for name in SERVE_MODULES if any(m == "serve" for m, _ in plan) else ():
        importlib.import_module(name)
    airline_agent.setup(args.airline)
    figures = [Driver(mode, kills, args).run() for mode, kills in plan]
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
