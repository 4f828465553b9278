"""Crash driver for a LangChain deep agent run, unchanged, as a graph step
(``deep_agent_task``): SIGKILL the process at random points, many times, resuming each
thread until it is done, and answering its ``interrupt_on`` approval as a person would.

Run by ``test_deep_agent_chaos.py`` as a subprocess, with the scripted model server running
in the test's process (``OPENAI_BASE_URL``; it appends every request to ``--log``)::

    python deep_chaos_driver.py --db URL --outside PATH --log PATH [--kills 30] [--seed N]

It imports longtask, LangChain and the task once; every run of a thread is an ``os.fork()``ed
child that opens its own ``Runner(db)`` and starts, resumes or approves the thread; once the
child is ready, the parent sleeps a random delay (seeded) and kills it with SIGKILL. First a
thread runs without kills (the reference: its outside state, and how long its runs take);
then one thread per side-effecting tool is killed by the tool itself right after its outside
commit (``$LT_KILL_AT``), so that every such point, those of the sub-agent's tools included,
is hit on every run; then threads run under random kills. After the kills, the thread in
flight is finished without kills. Prints its figures as one JSON line on stdout.

What it holds the runs to (``violations``):

- no tool call committed twice outside (by ``tool_call_id``), and every thread's outside
  state is the reference's (the same calls with the same arguments);
- no model request whose answer was already in the thread's checkpoints when the run that
  made it started (a turn that was answered, and a turn a person answered, is never asked
  of the model again): a request is known by the scripted server's answer id, which is the
  same for the same request; requests are told apart by the process that made them (a
  header the agent's model sends);
- no tool call waits for a person (every side-effecting tool is reconciled; the deep
  agent's ``task`` runs again, its sub-agent going on from its checkpoints): a cut-off call
  is settled by the reconcile;
- an accepted answer is not asked again: a killed approval is followed by a plain resume,
  which must move the thread past the approval; each thread records one answer;
- every thread completes with the agent's final answer, every ledger entry succeeded.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import deep_agent_task as d  # noqa: E402
from fakes import read_log  # noqa: E402
from fakes.openai_wire import completion  # noqa: E402

from longtask import Runner  # noqa: E402
from longtask.errors import ThreadBusy, ThreadNotFound  # noqa: E402

TASK = d.task
PERSON = "deep-driver"
#: how long a child waits for the lock of a killed predecessor
BUSY_WAIT = 15.0
CHILD_TIMEOUT = 90.0
DEBUG = bool(os.environ.get("LT_CHAOS_DEBUG"))
#: the ledger's names of the tool calls of one thread
EFFECTS = tuple(f"tool:{name}" for name in ("task", *d.SIDE_EFFECTS))
#: the model turns of a thread before it waits for the approval (all but the last)
ASKED_FIRST = d.MODEL_CALLS - 1
#: random kills of one thread, at most
KILLS_PER_THREAD = 4


# -- the child ------------------------------------------------------------------------------


def _wait_inactive(runner: Runner, thread: str) -> None:
    deadline = time.monotonic() + BUSY_WAIT
    while time.monotonic() < deadline:
        try:
            if not runner.status(thread).active:
                return
        except ThreadNotFound:
            return
        time.sleep(0.01)


def _act(runner: Runner, thread: str, action: dict[str, Any]) -> None:
    kind = action["kind"]
    if kind == "approve":
        runner.approve(thread, by=PERSON, task=TASK)
    elif kind == "resolve":
        runner.resolve_effect(
            thread, action["key"], action["outcome"], result=action.get("result"), by=PERSON
        )
    else:
        try:
            runner.status(thread)
        except ThreadNotFound:
            runner.start(TASK, {}, thread_id=thread)
        else:
            runner.resume(thread, task=TASK)


def _child(db: str, thread: str, action: dict[str, Any], wfd: int) -> None:
    """Body of a forked child: never returns."""
    code = 1
    report: dict[str, Any] = {}
    try:
        if action.get("kill_at"):
            os.environ["LT_KILL_AT"] = action["kill_at"]
            os.environ["LT_CRASH_MARKER"] = action["marker"]
        runner = Runner(db)
        try:
            _wait_inactive(runner, thread)
            os.write(wfd, b"R\n")
            ready = time.monotonic()
            deadline = ready + BUSY_WAIT
            while True:
                try:
                    _act(runner, thread, action)
                    break
                except ThreadBusy:
                    # the lock of a killed process, not noticed yet by the server
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
            report["status"] = runner.status(thread).status
            report["elapsed"] = round(time.monotonic() - ready, 4)
        finally:
            runner.close()
        code = 0
    except BaseException as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
        report["traceback"] = traceback.format_exc()[-3000:]
    finally:
        try:
            os.write(wfd, (json.dumps(report) + "\n").encode())
        finally:
            os._exit(code)


@dataclass
class ChildResult:
    pid: int
    killed: bool
    report: dict[str, Any] | None
    exit_code: int | None
    ready_wall: float | None  # time.time() when the child was ready


def _run_child(
    db: str, thread: str, action: dict[str, Any], kill_after: float | None
) -> ChildResult:
    """Fork a child for one run; kill it ``kill_after`` seconds after it is ready (None:
    let it finish, or kill itself)."""
    rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        _child(db, thread, action, wfd)
    os.close(wfd)
    buf = b""
    ready_at: float | None = None
    ready_wall: float | None = None
    done = False
    deadline = time.monotonic() + CHILD_TIMEOUT
    try:
        while not done:
            now = time.monotonic()
            if now > deadline:
                raise RuntimeError(f"child {pid} ({action}) did not finish in {CHILD_TIMEOUT}s")
            if ready_at is None or kill_after is None:
                timeout = deadline - now
            else:
                timeout = ready_at + kill_after - now
            readable, _, _ = select.select([rfd], [], [], max(0.0, timeout))
            if not readable:
                if ready_at is not None and kill_after is not None:
                    os.kill(pid, signal.SIGKILL)
                    break
                continue
            chunk = os.read(rfd, 65536)
            if not chunk:
                break  # the child exited (or killed itself)
            buf += chunk
            lines = buf.split(b"\n")
            if ready_at is None and b"R" in lines[:-1]:
                ready_at, ready_wall = time.monotonic(), time.time()
            done = any(line.startswith(b"{") for line in lines[:-1])
    finally:
        if not done:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(rfd)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    reports = [line for line in buf.split(b"\n")[:-1] if line.startswith(b"{")]
    report = json.loads(reports[0]) if reports and not killed else None
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    return ChildResult(pid, killed, report, exit_code, ready_wall)


# -- what the parent reads ------------------------------------------------------------------


@dataclass
class Look:
    status: str | None  # None: the thread does not exist yet
    #: ledger name -> (status, calls)
    effects: dict[str, tuple[str, int]] = field(default_factory=dict)
    pending: list[Any] = field(default_factory=list)
    #: the scripted server's ids of the model answers in the thread's checkpoints
    committed: frozenset[str] = frozenset()
    #: interrupts with an accepted answer (interrupt.resolved)
    answered: frozenset[str] = frozenset()


def _answer_ids(value: Any) -> set[str]:
    from langchain_core.messages import AIMessage

    out: set[str] = set()
    for message in value if isinstance(value, list) else [value]:
        if isinstance(message, AIMessage):
            rid = (message.response_metadata or {}).get("id")
            if rid:
                out.add(str(rid))
    return out


def _committed(runner: Runner, thread: str) -> frozenset[str]:
    """The model answers stored in the thread's checkpoints and their writes, every
    namespace (the agent's, its sub-agent's)."""
    out: set[str] = set()
    for tup in runner.db.saver.list({"configurable": {"thread_id": thread}}):
        out |= _answer_ids((tup.checkpoint.get("channel_values") or {}).get("messages"))
        for _task, channel, value in tup.pending_writes or []:
            if channel == "messages":
                out |= _answer_ids(value)
    return frozenset(out)


def _look(db: str, thread: str) -> Look:
    with Runner(db) as runner:
        try:
            st = runner.status(thread)
        except ThreadNotFound:
            return Look(None)
        effects = {e.name: (e.status, e.calls) for e in runner.effects(thread)}
        pending = list(runner.pending(thread)) if st.status == "waiting_user" else []
        answered = frozenset(
            str((e.data or {}).get("interrupt_id"))
            for e in runner.events(thread, kinds=["interrupt.resolved"])
        )
        return Look(st.status, effects, pending, _committed(runner, thread), answered)


@dataclass(frozen=True)
class ModelRequest:
    pid: int
    trip: str
    agent: str  # main / sub
    turn: int
    answer: str  # the server's id of its answer: the same for the same request
    ts: float


def _requests(log: Path) -> list[ModelRequest]:
    if not log.exists():
        return []
    out = []
    for r in read_log(log):
        text = r.first_text("user")
        trip = d.trip_of(text) or "?"
        agent = "sub" if text == d.BOOK.format(trip=trip) else "main"
        answer = completion(r, d.script(r))["id"]
        pid = int(r.headers.get(d.PID_HEADER.lower()) or 0)
        out.append(ModelRequest(pid, trip, agent, r.turn, answer, r.ts))
    return out


def _commits(outside: Path, pid: int, thread: str) -> list[tuple[str, float]]:
    """The outside commits of process ``pid`` for ``thread``: (tool, when)."""
    conn = d.connect(outside)
    try:
        found = conn.execute("SELECT tool, args, at FROM calls WHERE pid = ?", (pid,))
        return [(t, at) for t, a, at in found if json.loads(a).get("trip") == thread]
    finally:
        conn.close()


def _normal(thread: str, args: dict[str, Any]) -> str:
    """A call's arguments with the thread's own name taken out (to compare threads)."""
    return json.dumps(args, sort_keys=True).replace(thread, "*")


# -- the parent -----------------------------------------------------------------------------


class Driver:
    def __init__(
        self, db: str, outside: Path, log: Path, kills: int, seed: int, budget: float
    ) -> None:
        self.db, self.outside, self.log = db, outside, log
        self.target = kills
        self.rng = random.Random(seed)
        self.seed = seed
        self.budget = budget
        self.started = time.monotonic()
        self.prefix = f"deep-{seed}"
        self.threads: list[str] = []
        #: a thread killed by a tool at a chosen point first: thread -> LT_KILL_AT
        self.aim: dict[str, str] = {}
        self.run_time = {"run": 1.0, "approve": 1.0}
        #: from a run's start to its first model request
        self.startup = 0.3
        self.runs = 0
        self.kills = 0
        self.finished_before_kill = 0
        self.phases: Counter[str] = Counter()
        self.aimed: Counter[str] = Counter()
        self.kills_of: Counter[str] = Counter()
        self.in_subagent = 0
        self.cut_off: Counter[str] = Counter()
        self.answers = 0
        self.resumes_after_answer = 0
        self.errors: list[str] = []
        self.violations: list[str] = []
        #: pid -> the model answers committed when its run started
        self.committed_at_start: dict[int, frozenset[str]] = {}
        self.requests_seen = 0
        self.repeated_requests = 0
        self.reference: list[tuple[str, str]] = []

    # one run --------------------------------------------------------------------------------

    def _delay(self, action: dict[str, Any], before: Look) -> float:
        """A random point of what is left of a run of this kind: its start-up (a quarter of
        the kills) or the rest, a bit more than its share of the model turns not yet
        answered before the approval (or the run after the approval), so that some runs
        finish first."""
        if self.rng.random() < 0.25:
            return self.rng.uniform(0.0, self.startup)
        if action["kind"] == "approve" or action.get("answered"):
            span = self.run_time["approve"]
        else:
            left = max(1, ASKED_FIRST - len(before.committed)) / ASKED_FIRST
            span = self.startup + (self.run_time["run"] - self.startup) * left
        return self.rng.uniform(self.startup, max(self.startup, 1.1 * span))

    def _run(self, thread: str, action: dict[str, Any], kill: bool, before: Look) -> ChildResult:
        aim = self.aim.get(thread)
        marker = self.outside.parent / f"aim-{thread}"
        if aim is not None and not marker.exists():
            # the tool kills the process itself (only the tool named, once)
            action = {**action, "kill_at": aim, "marker": str(marker)}
        # a thread is killed a few times, then left to finish: the kills spread over many
        # threads, so over every part of a run, not over the last part of a few
        kill = kill and self.kills_of[thread] < KILLS_PER_THREAD
        kill_after = self._delay(action, before) if kill and "kill_at" not in action else None
        res = _run_child(self.db, thread, action, kill_after)
        # the model answers this run may not ask for again (see _check_requests)
        self.committed_at_start[res.pid] = before.committed
        self.runs += 1
        phase = None
        if res.killed:
            self.kills += 1
            self.kills_of[thread] += 1
            phase = self._classify(thread, before, res.pid)
            self.phases[phase] += 1
            if "kill_at" in action:
                self.aimed[f"{action['kill_at']} -> {phase}"] += 1
        else:
            if kill_after is not None:
                self.finished_before_kill += 1
            report = res.report or {}
            if res.exit_code != 0 or "error" in report:
                self.errors.append(
                    f"{thread} {action['kind']}: exit {res.exit_code}: "
                    f"{report.get('error')}\n{report.get('traceback', '')}"
                )
        self._check_requests()
        if DEBUG:
            shown = res.report and {k: v for k, v in res.report.items() if k != "traceback"}
            print(
                f"{thread} {action['kind']} status={before.status} kill_at="
                f"{action.get('kill_at')} delay={kill_after and round(kill_after, 3)} "
                f"killed={res.killed} phase={phase} report={shown}",
                file=sys.stderr,
            )
        return res

    def _check_requests(self) -> None:
        """No model request asks what the thread's checkpoints held an answer to when the
        run that asked started."""
        requests = _requests(self.log)
        for r in requests[self.requests_seen :]:
            known = self.committed_at_start.get(r.pid)
            if known is None:
                self.errors.append(f"a model request from an unknown process: {r}")
            elif r.answer in known:
                self.violations.append(
                    f"{r.trip}: the {r.agent} agent's turn {r.turn} was asked again (pid "
                    f"{r.pid}) though its answer was in the thread's checkpoints"
                )
        self.requests_seen = len(requests)

    def _classify(self, thread: str, before: Look, pid: int) -> str:
        after = _look(self.db, thread)
        mine = [r for r in d.rows(self.outside) if r[3] == pid and r[2].get("trip") == thread]
        cut = [
            name
            for name, row in after.effects.items()
            if row[0] == "started" and before.effects.get(name) != row
        ]
        task = after.effects.get("tool:task")
        if task is not None and task[0] != "succeeded":
            # the task call was running: its sub-agent had started, or was about to
            self.in_subagent += 1
        for name in cut:
            self.cut_off[name] += 1
        tools = [n.removeprefix("tool:") for n in cut]
        committed = [t for t in tools if any(row[1] == t for row in mine)]
        if committed:
            return f"{committed[0]}: after its outside commit"
        if "task" in tools:
            return "task: before its sub-agent's first call"
        if tools:
            return f"{tools[0]}: before its outside commit"
        # none cut off: where the process was, by its last model request or commit
        asked = [r for r in _requests(self.log) if r.pid == pid]
        last = [(r.ts, f"at or after a model call ({r.agent} agent)") for r in asked]
        last += [(at, f"after {tool}") for tool, at in _commits(self.outside, pid, thread)]
        return max(last)[1] if last else "before its first model call or outside commit"

    # the person -----------------------------------------------------------------------------

    def _person(self, thread: str, look: Look, kill: bool) -> None:
        effects = [p for p in look.pending if p.kind == "effect"]
        if effects:
            # every call is reconciled or idempotent: none should wait for a person
            p = effects[0]
            self.violations.append(f"{thread}: a tool call waits for a person: {p.request}")
            found = d.lookup(str(p.request.get("tool_call_id")))
            outcome = "succeeded" if found is not None else "retry"
            action = {"kind": "resolve", "key": p.request["key"], "outcome": outcome}
            self._run(thread, {**action, "result": found}, False, look)
            return
        review = next((p for p in look.pending if p.kind == "interrupt"), None)
        if review is None:
            self.errors.append(f"{thread} waits for {look.pending}")
            self._run(thread, {"kind": "run"}, False, look)
            return
        if review.interrupt_id in look.answered:
            # an approval killed after it was accepted: a plain resume goes on with it
            self.resumes_after_answer += 1
            res = self._run(thread, {"kind": "run", "answered": True}, kill, look)
            if not res.killed:
                after = _look(self.db, thread)
                if any(p.interrupt_id == review.interrupt_id for p in after.pending):
                    self.violations.append(f"{thread}: an accepted answer was asked again")
            return
        self.answers += 1
        self._run(thread, {"kind": "approve"}, kill, look)

    # the loop -------------------------------------------------------------------------------

    def _new_thread(self, name: str | None = None) -> str:
        thread = f"{self.prefix}-{name or len(self.threads)}"
        self.threads.append(thread)
        return thread

    def _advance(self, thread: str, kill: bool) -> bool:
        """One step of driving ``thread``; True once it is completed."""
        look = _look(self.db, thread)
        if look.status == "completed":
            return True
        if look.status == "failed":
            self.errors.append(f"{thread} failed (resuming it)")
        if look.status == "waiting_user":
            self._person(thread, look, kill)
        else:
            self._run(thread, {"kind": "run"}, kill, look)
        return False

    def _reference(self) -> None:
        """One thread without kills: its outside state, and how long its runs take."""
        thread = self._new_thread("reference")
        for kind in ("run", "approve"):
            res = self._run(thread, {"kind": kind}, False, _look(self.db, thread))
            self.run_time[kind] = float((res.report or {}).get("elapsed") or 1.0)
            if kind == "run" and res.ready_wall is not None:
                first = min(r.ts for r in _requests(self.log) if r.pid == res.pid)
                self.startup = round(max(0.0, first - res.ready_wall), 4)
        self.answers += 1
        self.reference = self._outside_state(thread)

    def _outside_state(self, thread: str) -> list[tuple[str, str]]:
        return sorted(
            (tool, _normal(thread, args))
            for _, tool, args, _ in d.rows(self.outside)
            if args.get("trip") == thread
        )

    def _finish(self, thread: str) -> None:
        for _ in range(30):
            if self._advance(thread, kill=False):
                return
        self.errors.append(f"{thread} did not complete after the kills")

    def run(self) -> dict[str, Any]:
        self._reference()
        for tool in d.SIDE_EFFECTS:
            thread = self._new_thread(f"aim-{tool}")
            self.aim[thread] = f"{tool}:after"
            while not self._advance(thread, kill=self.kills < self.target):
                pass
        thread = self._new_thread()
        while self.kills < self.target:
            if time.monotonic() - self.started > self.budget:
                self.errors.append(f"time budget of {self.budget}s spent after {self.kills} kills")
                break
            if self._advance(thread, kill=True):
                thread = self._new_thread()
        if _look(self.db, thread).status is None:
            self.threads.remove(thread)  # a fresh thread that never ran
        else:
            self._finish(thread)
        self._check_threads()
        return self.figures()

    def _check_threads(self) -> None:
        calls = d.rows(self.outside)
        per_id = Counter(i for i, *_ in calls)
        twice = sorted(i for i, n in per_id.items() if n > 1)
        if twice:
            self.violations.append(f"tool calls committed more than once: {twice}")
        with Runner(self.db) as runner:
            for thread in self.threads:
                st = runner.status(thread)
                if st.status != "completed":
                    self.violations.append(f"{thread} is {st.status}")
                    continue
                if runner.result(thread, "plan") != f"Trip {thread} planned.":
                    self.violations.append(f"{thread}: {runner.result(thread, 'plan')!r}")
                ledger = {e.name: e.status for e in runner.effects(thread)}
                if ledger != dict.fromkeys(EFFECTS, "succeeded"):
                    self.violations.append(f"{thread}: ledger {ledger}")
                answers = runner.events(thread, kinds=["interrupt.resolved"])
                if len(answers) != 1:
                    self.violations.append(f"{thread}: {len(answers)} answers recorded")
                if self._outside_state(thread) != self.reference:
                    self.violations.append(
                        f"{thread}: outside state {self._outside_state(thread)} is not the "
                        f"reference's {self.reference}"
                    )
        requests = _requests(self.log)
        asked = Counter((r.trip, r.agent, r.turn, r.answer) for r in requests)
        self.repeated_requests = sum(n - 1 for n in asked.values())
        for thread in self.threads:
            turns = {k for k in asked if k[0] == thread}
            if len(turns) != d.MODEL_CALLS:
                self.violations.append(f"{thread}: {len(turns)} distinct model requests")

    def figures(self) -> dict[str, Any]:
        calls = d.rows(self.outside)
        reconciled = Counter[str]()
        with Runner(self.db) as runner:
            for thread in self.threads:
                for e in runner.events(thread, kinds=["effect.succeeded"]):
                    if (e.data or {}).get("reconciled"):
                        reconciled[str(e.data["name"])] += 1
        return {
            "backend": "postgres" if self.db.startswith("postgres") else "sqlite",
            "seed": self.seed,
            "runs": self.runs,
            "kills": self.kills,
            "finished_before_kill": self.finished_before_kill,
            "threads": len(self.threads),
            "kills_by_phase": dict(sorted(self.phases.items())),
            "aimed_kills": dict(sorted(self.aimed.items())),
            "kills_in_subagent": self.in_subagent,
            "cut_off_calls": dict(sorted(self.cut_off.items())),
            "reconciled": dict(sorted(reconciled.items())),
            "answers": self.answers,
            "resumes_after_answer": self.resumes_after_answer,
            "tool_calls_committed": len(calls),
            "model_requests": len(_requests(self.log)),
            "model_requests_repeated": self.repeated_requests,
            "run_time": {**self.run_time, "startup": self.startup},
            "errors": self.errors,
            "violations": self.violations,
            "duration": round(time.monotonic() - self.started, 2),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--outside", required=True, help="the outside system's SQLite file")
    parser.add_argument("--log", required=True, help="the scripted model server's request log")
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget", type=float, default=120.0, help="seconds for the kills")
    args = parser.parse_args(argv)
    os.environ[d.OUTSIDE_ENV] = args.outside
    d.connect(args.outside).close()  # the table exists before any child runs
    d.agent()  # LangChain's lazy imports, once, before the children are forked
    driver = Driver(args.db, Path(args.outside), Path(args.log), args.kills, args.seed, args.budget)
    print(json.dumps(driver.run()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
