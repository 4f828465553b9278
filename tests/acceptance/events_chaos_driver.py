"""Crash driver of the event test: SIGKILL ``longtask run``/``longtask resume`` at random
points of ``events_chaos_task`` many times, checking from the database after every kill that
no committed work lost its events.

Run by ``test_events_chaos.py`` as a subprocess, with the scripted model server's URL in
``$OPENAI_BASE_URL`` (the server runs in the test's process and logs every request)::

    python events_chaos_driver.py --db URL --log REQUESTS.jsonl --kills 25 --seed N

Every run is the CLI (``longtask run TASK --thread T``, then ``longtask resume T``) in a
forked child: the parent imports longtask, LangChain and the task once, so a child starts in
milliseconds instead of paying two seconds of imports, and the kill delays fall inside the
run. The parent never holds a database connection (or a thread) across a fork: it opens a
Runner to look at the thread between runs and closes it before the next fork. A child that
finishes before its kill is fine (counted); a completed thread is followed by a new one.

After every kill, and once more when every thread has completed, the checks (all from the
database, the counter and the server's log):

- every step whose result is committed (the latest checkpoint's values or its pending
  writes) has its ``step.started`` and ``step.completed`` events, and every
  ``step.completed`` stored is of a step whose result is committed;
- every model response stored in any committed checkpoint value or pending write of the
  thread (the agent's messages) is one the server answered, and has a ``model.call`` event
  with its response id;
- a function step's committed result names the counter row of the run that produced it:
  once seen, it never changes, and no later call of that step is counted (no step ran
  again after its result was committed);
- every ``succeeded`` effect was called once by the service; every effect ledger row has
  its ``effect.started`` event, every ``succeeded`` one its ``effect.succeeded`` (the ledger
  commits on its own, before the outside call, and its events with it).

On PostgreSQL some runs meet a database fault instead of a kill (``--faults``): at a random
point every connection of the run's database is ended (``cut``: ``pg_terminate_backend``,
a dropped link), or the database also refuses new connections for a random while
(``stop``: ``ALLOW_CONNECTIONS false``, as a stopped server would; the shared server itself
is never stopped). The run is given ``$LONGTASK_DB_TIMEOUT=2``: a short outage is survived
(the next write reconnects), a long one ends it with "lost the connection"; either way the
checks run after it, and once more after a SIGKILL that may follow a fault. A step's
``step.completed`` may be stored at most once: a second one means it ran again after its
event was stored.

Kills are classified by where they landed, from the marks the task writes and the server's
log: ``in_effect`` (inside the service call), ``in_model_call`` (a model request the server
had not answered yet), ``in_step`` (a function step's own code), ``other`` (start-up,
checkpoint writes, the agent's tool, between steps).
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
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for fakes

import chaos_task
import events_chaos_task as T
from fakes import read_log
from fakes.openai_wire import completion

from longtask import Runner
from longtask.cli._app import _dispatch
from longtask.errors import ThreadNotFound
from longtask.runtime._taskref import load_task

HERE = Path(__file__).resolve().parent
TASK_REF = f"{HERE / 'events_chaos_task.py'}:task"
#: about how long a run spends starting, and in each stage (s, measured under load): kill
#: delays are uniform over a bit more than what is left of the thread, so that kills fall
#: all along a run and few runs finish first
START = 0.25
STAGE_TIME = {"prep": 0.2, "research": 0.45, "finish": 0.2}
#: where kills must land (see _classify)
PHASES = ("in_effect", "in_model_call", "in_step")
CHILD_TIMEOUT = 90.0
BUSY_WAIT = 15.0
DEBUG = bool(os.environ.get("LT_CHAOS_DEBUG"))


def script(turn: int) -> Any:
    """The model's reply at ``turn`` (the test's server answers the same)."""
    from fakes import Reply

    if turn < T.TURNS - 1:
        reply = Reply.tool_calls([("lookup", {"topic": f"topic-{turn}"})])
    else:
        reply = Reply.text("notes taken")
    return Reply.slow(reply, T.MODEL_DELAY)


# -- the child ------------------------------------------------------------------------------


def _child(args: list[str], out: str, wfd: int) -> None:
    """Body of a forked child: the CLI, its output in ``out``; never returns."""
    code = 99
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.write(wfd, b"R\n")
        if os.environ.get("LONGTASK_DB", "").startswith("postgres"):
            # a database fault ends a run that cannot reach it within 2 s (see --faults)
            os.environ["LONGTASK_DB_TIMEOUT"] = "2"
        code = _dispatch(args)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run_child(
    args: list[str], out: str, kill_after: float | None, fault: Any = None
) -> tuple[int, bool, float, int | None]:
    """Fork the CLI; SIGKILL it ``kill_after`` s after it is ready (with ``fault``: call
    ``fault()`` then instead, and let the child go on to its end, or kill it as many
    seconds later as ``fault()`` returned). Returns its pid, whether it was killed, when
    (wall clock), and its exit code."""
    rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        _child(args, out, wfd)
    os.close(wfd)
    ready_at: float | None = None
    killed_at: float | None = None
    exited = False
    deadline = time.monotonic() + CHILD_TIMEOUT
    try:
        while True:
            now = time.monotonic()
            if now > deadline:
                raise RuntimeError(f"child {pid} ({args}) did not finish in {CHILD_TIMEOUT}s")
            if ready_at is None or kill_after is None:
                timeout = deadline - now
            else:
                timeout = ready_at + kill_after - now
            readable, _, _ = select.select([rfd], [], [], max(0.0, timeout))
            if not readable:
                if ready_at is not None and kill_after is not None:
                    if fault is not None:
                        then = fault()
                        fault = None
                        # the child goes on to its end, or is killed a moment later
                        kill_after = None if then is None else time.monotonic() - ready_at + then
                        continue
                    killed_at = time.time()
                    os.kill(pid, signal.SIGKILL)
                    break
                continue
            chunk = os.read(rfd, 64)
            if not chunk:
                exited = True  # the child exited
                break
            if ready_at is None:
                ready_at = time.monotonic()
    finally:
        if killed_at is None and not exited:
            # given up on: never leave it running
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(rfd)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    return pid, killed, killed_at or time.time(), code


# -- reading the database -------------------------------------------------------------------


def _walk_messages(obj: Any, found: set[str]) -> None:
    """Collect the response ids of AI messages anywhere in ``obj``."""
    from langchain_core.messages import AIMessage

    if isinstance(obj, AIMessage):
        rid = (obj.response_metadata or {}).get("id") or obj.id
        if rid:
            found.add(str(rid))
    elif isinstance(obj, dict):
        for v in obj.values():
            _walk_messages(v, found)
    elif isinstance(obj, list | tuple):
        for v in obj:
            _walk_messages(v, found)


def stored_responses(runner: Runner, thread: str) -> set[str]:
    """Response ids of every model answer stored in a committed value or pending write of
    the thread (any namespace: the agent's subgraph keeps its messages there)."""
    saver = runner.db.saver
    found: set[str] = set()
    for table in ("longtask_cp_values", "longtask_cp_writes"):
        rows = saver.backend.read(f"SELECT type, value FROM {table} WHERE thread_id = ?", (thread,))
        for type_, value in rows:
            if value is None:
                continue
            _walk_messages(saver.serde.loads_typed((type_, bytes(value))), found)
    return found


def committed_results(runner: Runner, thread: str) -> dict[str, Any]:
    """Results of the steps committed in the thread's latest checkpoint (its values and its
    pending writes), by step."""
    tup = runner.db.saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
    if tup is None:
        return {}
    raw: dict[str, Any] = {}
    for channel, value in tup.checkpoint["channel_values"].items():
        if channel.startswith("out."):
            raw[channel[4:]] = value
    for _task, channel, value in tup.pending_writes or ():
        if channel.startswith("out."):
            raw.setdefault(channel[4:], value)
    return {k: runner.codec.decode(v, strict=False) for k, v in raw.items()}


def answered_ids(log: Path) -> set[str]:
    """Ids of the answers the server gives to the requests it logged."""
    if not log.exists():
        return set()
    return {completion(r, script(r.turn))["id"] for r in read_log(log)}


# -- the parent -----------------------------------------------------------------------------


class Driver:
    def __init__(
        self,
        db: str,
        log: Path,
        counter: Path,
        marks: Path,
        kills: int,
        seed: int,
        faults: int = 0,
        admin: str | None = None,
    ):
        self.db, self.log, self.counter, self.marks = db, log, counter, marks
        self.target = kills
        #: database faults to cause (PostgreSQL), through the maintenance database ``admin``
        self.fault_target = faults if db.startswith("postgres") and admin else 0
        self.admin = admin
        self.faults: Counter[str] = Counter()
        self.fault_outcomes: Counter[str] = Counter()
        self.seed = seed
        self.rng = random.Random(seed)
        self.prefix = f"evchaos-{seed}"
        self.threads: list[str] = []
        self.runs = 0
        self.resumes = 0
        self.kills = 0
        self.finished_before_kill = 0
        self.checks = 0
        self.phases: Counter[str] = Counter()
        self.errors: list[str] = []
        self.violations: list[str] = []
        #: thread -> step -> the counter row of its committed result, once seen
        self.committed: dict[str, dict[str, int]] = {}
        self.model_calls_checked = 0
        self.steps_checked = 0
        self.facts_checked = 0
        self.started = time.monotonic()

    # a run ------------------------------------------------------------------------------------

    def _status(self, thread: str) -> tuple[str | None, bool, float]:
        """Status, whether a process holds it, and about how long its rest takes."""
        with Runner(self.db) as runner:
            try:
                st = runner.status(thread)
            except ThreadNotFound:
                return None, False, START + sum(STAGE_TIME.values())
            left = {s.stage for s in st.steps if s.state != "completed"}
            return st.status, st.active, START + sum(STAGE_TIME[s] for s in left)

    def _wait_inactive(self, thread: str) -> tuple[str | None, float]:
        deadline = time.monotonic() + BUSY_WAIT
        while True:
            status, active, left = self._status(thread)
            if not active or time.monotonic() > deadline:
                return status, left
            time.sleep(0.02)

    def _fault(self, kind: str) -> float | None:
        """End every connection to the run's database (``cut``); for ``stop``, also refuse
        new ones for a random while (the database's own switch: the shared server stays
        up). Half the time, a random delay after which the run is killed too."""
        import psycopg

        name = self.db.rsplit("/", 1)[1].split("?", 1)[0]
        assert self.admin is not None
        with psycopg.connect(self.admin, autocommit=True, connect_timeout=10) as conn:
            if kind == "stop":
                conn.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
            try:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (name,),
                )
                if kind == "stop":
                    # shorter than the run's bound (survived), longer (the run ends), and
                    # ending while the run gives up
                    time.sleep(self.rng.uniform(0.2, 4.0))
            finally:
                if kind == "stop":
                    conn.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')
        return self.rng.uniform(0.0, 1.5) if self.rng.random() < 0.5 else None

    def _run(self, thread: str, kill: bool) -> bool:
        """One run of ``thread`` (killed at a random point when ``kill``, or meeting a
        database fault there, see ``--faults``); True when the thread is completed
        afterwards."""
        status, left = self._wait_inactive(thread)
        if status == "completed":
            return True
        if status is None:
            args = ["run", TASK_REF, "--thread", thread, "--input", '{"subject": "crashes"}']
        else:
            args = ["resume", thread]
        delay = self.rng.uniform(0.0, 1.1 * left) if kill else None
        fault_kind = None
        if kill and sum(self.faults.values()) < self.fault_target and self.rng.random() < 0.4:
            fault_kind = ("cut", "stop")[sum(self.faults.values()) % 2]
        with tempfile.NamedTemporaryFile("r", suffix=".out", delete=False) as f:
            out = f.name
        try:
            fault = (lambda: self._fault(fault_kind)) if fault_kind else None
            pid, killed, killed_at, code = _run_child(args, out, delay, fault)
            output = Path(out).read_text(errors="replace")
        finally:
            os.unlink(out)
        self.runs += 1
        self.resumes += args[0] == "resume"
        phase = None
        if fault_kind is not None:
            self.faults[fault_kind] += 1
            if killed:
                self.kills += 1
                self.fault_outcomes["killed after"] += 1
            elif code == 0:
                self.fault_outcomes["survived"] += 1
            elif code == 1 and "error: lost the connection to the database" in output:
                self.fault_outcomes["lost"] += 1
            elif code == 1 and "error: cannot connect to PostgreSQL" in output:
                self.fault_outcomes["refused at start"] += 1
            else:
                self.errors.append(f"{thread} {args[0]} after a {fault_kind}: {output[-3000:]}")
            self.check(thread)
        elif killed:
            self.kills += 1
            phase = self._classify(pid, killed_at)
            self.phases[phase] += 1
            self.check(thread)
        else:
            if kill:
                self.finished_before_kill += 1
            if code != 0:
                self.errors.append(f"{thread} {args[0]}: exit {code}: {output[-3000:]}")
        if DEBUG:
            print(
                f"{thread} {args[0]} delay={delay and round(delay, 3)} killed={killed} "
                f"code={code} phase={phase}",
                file=sys.stderr,
            )
        return not killed and code == 0

    def _classify(self, pid: int, killed_at: float) -> str:
        state: dict[str, bool] = {}
        for _ts, phase in T.marks(self.marks, pid):
            kind, name, side = phase.split(":")
            state[f"{kind}:{name}"] = side == "in"
        open_effect = any(v for k, v in state.items() if k.startswith("effect:"))
        open_step = any(v for k, v in state.items() if k.startswith("step:"))
        if open_effect:
            return "in_effect"
        if self.log.exists():
            for request in read_log(self.log):
                # received, and not yet answered when the process died
                if request.ts <= killed_at < request.ts + T.MODEL_DELAY:
                    return "in_model_call"
        return "in_step" if open_step else "other"

    # the checks -------------------------------------------------------------------------------

    def check(self, thread: str) -> None:
        self.checks += 1
        calls = T.counted_calls(self.counter)
        service: Counter[str] = Counter(
            k for _, k, _, _ in chaos_task.service_calls(os.environ[chaos_task.SERVICE_ENV])
        )
        answered = answered_ids(self.log)
        with Runner(self.db) as runner:
            try:
                runner.status(thread)
            except ThreadNotFound:
                return  # killed before the thread was stored: nothing committed
            events = runner.events(thread)
            results = committed_results(runner, thread)
            responses = stored_responses(runner, thread)
            ledger = runner.effects(thread)
        kinds: dict[str, set[str]] = {}
        for e in events:
            kinds.setdefault(e.kind, set()).add(e.step or "")
        where = f"{thread} (kill {self.kills})"

        # (a) committed steps have their events
        for step in results:
            self.steps_checked += 1
            for kind in ("step.started", "step.completed"):
                if step not in kinds.get(kind, set()):
                    self.violations.append(f"{where}: {step} committed without {kind}")

        # (a') and no fact about work that no checkpoint holds: a step.completed commits
        # with its step's result (events about work in progress, step.started and the
        # like, are stored while it runs and stay when it dies)
        for e in events:
            if e.kind == "step.completed":
                self.facts_checked += 1
                if e.step not in results:
                    self.violations.append(
                        f"{where}: step.completed of {e.step} with no committed result"
                    )

        # (a'') a step's step.completed is stored once: a second means it ran again after
        # its event was stored (one that had no checkpoint behind it)
        completed = Counter(e.step for e in events if e.kind == "step.completed")
        for step, n in sorted(completed.items()):
            if n > 1:
                self.violations.append(f"{where}: {n} step.completed events of {step}")

        # (b) stored model answers were answered by the server and have their model.call
        recorded = {str(e.data.get("response_id")) for e in events if e.kind == "model.call"}
        for rid in sorted(responses):
            self.model_calls_checked += 1
            if rid not in answered:
                self.violations.append(f"{where}: stored response {rid} the server never gave")
            if rid not in recorded:
                self.violations.append(f"{where}: stored response {rid} has no model.call event")

        # (c) no function step ran again after its result was committed
        seen = self.committed.setdefault(thread, {})
        for step in T.FUNCTION_STEPS:
            if step not in results:
                if step in seen:
                    self.violations.append(f"{where}: committed result of {step} disappeared")
                continue
            call = int(results[step]["call"])
            if seen.setdefault(step, call) != call:
                self.violations.append(
                    f"{where}: {step}'s committed result changed: call {seen[step]} -> {call}"
                )
            later = [r for r, t, s, _ in calls if t == thread and s == step and r > seen[step]]
            if later:
                self.violations.append(
                    f"{where}: {step} ran again after its result was committed: rows {later}"
                )
        # effects: each succeeded key called once; every ledger row has effect.started
        for row in ledger:
            if row.status == "succeeded" and service[row.key] != 1:
                self.violations.append(
                    f"{where}: effect {row.key} succeeded with {service[row.key]} calls"
                )
            if row.step not in kinds.get("effect.started", set()):
                self.violations.append(f"{where}: effect {row.key} has no effect.started")
            if row.status == "succeeded" and row.step not in kinds.get("effect.succeeded", set()):
                self.violations.append(f"{where}: effect {row.key} has no effect.succeeded")

    # the loop ---------------------------------------------------------------------------------

    def _new_thread(self) -> str:
        thread = f"{self.prefix}-{len(self.threads)}"
        self.threads.append(thread)
        return thread

    def run(self) -> dict[str, Any]:
        thread = self._new_thread()
        # The requested kills, and more (up to three times as many) until a kill has landed
        # in each kind of place: random delays, but every kind is checked.
        while (
            self.kills < self.target
            or sum(self.faults.values()) < self.fault_target
            or (not all(self.phases[p] for p in PHASES) and self.kills < 3 * self.target)
        ):
            if self._run(thread, kill=True):
                self.check(thread)
                thread = self._new_thread()
        if self._status(thread)[0] is None:
            self.threads.remove(thread)  # never stored: dropped
        else:
            for _ in range(10):
                if self._run(thread, kill=False):
                    break
            else:
                self.errors.append(f"{thread} did not complete after the kills")
        # the final word: every thread completed, and every check holds
        with Runner(self.db) as runner:
            for t in self.threads:
                status = runner.status(t).status
                if status != "completed":
                    self.errors.append(f"{t} ended {status}")
        for t in self.threads:
            self.check(t)
        return self.figures()

    def figures(self) -> dict[str, Any]:
        return {
            "backend": "postgres" if self.db.startswith("postgres") else "sqlite",
            "seed": self.seed,
            "kills": self.kills,
            "runs": self.runs,
            "resumes": self.resumes,
            "finished_before_kill": self.finished_before_kill,
            "threads": len(self.threads),
            "thread_ids": self.threads,
            "checks": self.checks,
            "steps_checked": self.steps_checked,
            "completed_events_checked": self.facts_checked,
            "model_responses_checked": self.model_calls_checked,
            "kills_by_phase": dict(sorted(self.phases.items())),
            "faults": dict(sorted(self.faults.items())),
            "fault_outcomes": dict(sorted(self.fault_outcomes.items())),
            "errors": self.errors,
            "violations": self.violations,
            "duration": round(time.monotonic() - self.started, 2),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--log", required=True, help="the model server's request log")
    parser.add_argument("--work", required=True, help="a directory for the counter and marks")
    parser.add_argument("--kills", type=int, default=25)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--faults", type=int, default=0, help="database faults to cause (PostgreSQL only)"
    )
    parser.add_argument("--admin", help="the server's maintenance database (for the faults)")
    args = parser.parse_args(argv)
    work = Path(args.work)
    marks = work / "marks"
    marks.mkdir(parents=True, exist_ok=True)
    os.environ["LONGTASK_DB"] = args.db  # the CLI's database, as the user would set it
    os.environ[T.COUNTER_ENV] = str(work / "counter.db")
    os.environ[T.MARKS_ENV] = str(marks)
    os.environ.setdefault(chaos_task.SERVICE_ENV, str(work / "service.db"))
    chaos_task.connect(os.environ[chaos_task.SERVICE_ENV]).close()
    T._counter(work / "counter.db").close()
    # everything a run imports, imported once here (a forked child inherits it)
    load_task(TASK_REF)
    import langchain.agents  # noqa: F401
    import langchain_openai  # noqa: F401

    driver = Driver(
        args.db,
        Path(args.log),
        work / "counter.db",
        marks,
        args.kills,
        args.seed,
        faults=args.faults,
        admin=args.admin,
    )
    figures = driver.run()
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
