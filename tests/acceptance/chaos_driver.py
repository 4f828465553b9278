"""Chaos driver for the side-effect ledger: SIGKILL a process running ``chaos_task`` at
random points, many times, resuming each thread until it is done.

Run by ``test_chaos.py`` as a subprocess (never inside pytest's own process)::

    python chaos_driver.py --db URL --service PATH [--kills 100] [--seed N]

It imports longtask and the task once; then every run of a thread is an ``os.fork()``ed
child that opens its own ``Runner(db)`` (the database is opened after the fork: no
connection or pool is ever shared across a fork) and starts or resumes the thread. Once
the child is ready, the parent sleeps a random delay (seeded) and kills it with SIGKILL;
a child that finishes first is fine and counted. Between runs the parent opens a Runner of
its own to look at the thread and the ledger, and closes it before the next fork.

When the thread is ``waiting_user`` because an effect without a reconciler was cut off,
the driver checks that resuming it (twice, without killing) leaves it waiting and does not
call the service, then acts as the person: if the service recorded the call it resolves
the effect ``succeeded`` with the recorded result, else ``retry``. That resolution (which
continues the thread) is a killable run too.

After the requested number of kills, the current thread is resumed without kills until it
completes; a thread that completes earlier is followed by a new one. Prints its figures as
one JSON line on stdout.

Kill phases, told from the ledger and the service after each kill:

- ``before_effect``: the run changed nothing in the ledger while effects were left to do
  (start-up, step code before the call);
- ``in_effect_before_call``: it left an effect ``started`` and the service has no call of
  it from the killed process (between the ledger's start and the service's insert);
- ``in_effect_after_call``: it left an effect ``started`` that the service did record from
  the killed process (the worst case: the call happened, the ledger does not know);
- ``after_effect``: it finished effects (or had none left) and was killed outside any call.
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
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chaos_task

from longtask import Runner
from longtask.errors import ThreadBusy, ThreadNotFound

TASK = chaos_task.task
PERSON = "chaos-driver"
#: a stage's wall time, about (see chaos_task's sleeps), and a run's fixed cost (measured:
#: a whole run takes 0.4-0.47 s from the child's "ready" on either backend)
STAGE_TIME = 0.07
RUN_OVERHEAD = 0.08
#: how long a child waits for the lock of a killed predecessor (PostgreSQL notices the
#: dead connection a moment after the kill)
BUSY_WAIT = 15.0
#: how long a child may take before the parent gives up on it
CHILD_TIMEOUT = 60.0
#: one line per run on stderr
DEBUG = bool(os.environ.get("LT_CHAOS_DEBUG"))


# -- the child ------------------------------------------------------------------------------


def _wait_inactive(runner: Runner, thread: str) -> int:
    """Poll (bounded) until no process holds ``thread``; returns the number of polls."""
    polls = 0
    deadline = time.monotonic() + BUSY_WAIT
    while time.monotonic() < deadline:
        try:
            if not runner.status(thread).active:
                return polls
        except ThreadNotFound:
            return polls
        polls += 1
        time.sleep(0.01)
    return polls


def _child(db: str, thread: str, action: dict[str, Any], seed: int, wfd: int) -> None:
    """Body of a forked child: never returns."""
    code = 1
    report: dict[str, Any] = {}
    try:
        random.seed(seed)
        runner = Runner(db)
        try:
            report["busy_polls"] = _wait_inactive(runner, thread)
            os.write(wfd, b"R\n")
            ready = time.monotonic()
            busy = 0
            deadline = time.monotonic() + BUSY_WAIT
            while True:
                try:
                    if action["kind"] == "resolve":
                        runner.resolve_effect(
                            thread,
                            action["key"],
                            action["outcome"],
                            result=action.get("result"),
                            by=PERSON,
                            task=TASK,
                        )
                    else:
                        try:
                            runner.status(thread)
                        except ThreadNotFound:
                            runner.start(TASK, {}, thread_id=thread)
                        else:
                            runner.resume(thread, task=TASK)
                    break
                except ThreadBusy:
                    # the lock of a killed process, not noticed yet by the server
                    busy += 1
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
            report["busy_retries"] = busy
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


def _run_child(
    db: str, thread: str, action: dict[str, Any], seed: int, kill_after: float | None
) -> ChildResult:
    """Fork a child for one run; kill it ``kill_after`` seconds after it is ready (None:
    let it finish)."""
    rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        _child(db, thread, action, seed, wfd)
    os.close(wfd)
    buf = b""
    ready_at: float | None = None
    done = False
    deadline = time.monotonic() + CHILD_TIMEOUT
    try:
        while not done:
            now = time.monotonic()
            if ready_at is None or kill_after is None:
                timeout = deadline - now
            else:
                timeout = ready_at + kill_after - now
            if now > deadline:
                raise RuntimeError(f"child {pid} ({action}) did not finish in {CHILD_TIMEOUT}s")
            readable, _, _ = select.select([rfd], [], [], max(0.0, timeout))
            if not readable:
                if ready_at is not None and kill_after is not None:
                    os.kill(pid, signal.SIGKILL)
                    break
                continue
            chunk = os.read(rfd, 65536)
            if not chunk:
                break  # the child exited
            buf += chunk
            lines = buf.split(b"\n")
            if ready_at is None and b"R" in lines[:-1]:
                ready_at = time.monotonic()
            done = any(line.startswith(b"{") for line in lines[:-1])
    finally:
        if not done:
            # a child that is still running when we leave is killed (kill or give-up)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(rfd)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    reports = [line for line in buf.split(b"\n")[:-1] if line.startswith(b"{")]
    report = json.loads(reports[0]) if reports and not killed else None
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    return ChildResult(pid, killed, report, exit_code)


# -- the parent -----------------------------------------------------------------------------


@dataclass
class Snapshot:
    status: str | None  # None: the thread does not exist yet
    #: effect key -> (step, status, calls)
    ledger: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    waiting: list[dict[str, Any]] = field(default_factory=list)
    stages_left: int = 5


def _inspect(db: str, thread: str) -> Snapshot:
    with Runner(db) as runner:
        try:
            st = runner.status(thread)
        except ThreadNotFound:
            return Snapshot(None)
        ledger = {e.key: (e.step, e.status, e.calls) for e in runner.effects(thread)}
    stages_left = len({s.stage for s in st.steps if s.state != "completed"})
    return Snapshot(st.status, ledger, list(st.waiting), stages_left)


def _effects_left(snap: Snapshot) -> int:
    """Effects the thread has still to perform (not yet ``succeeded`` in the ledger)."""
    done = {step for step, status, _ in snap.ledger.values() if status == "succeeded"}
    return len(set(chaos_task.STEPS) - done)


def _service_by_key(service: str) -> dict[str, list[tuple[int, str, int]]]:
    out: dict[str, list[tuple[int, str, int]]] = {}
    for rowid, key, step, pid in chaos_task.service_calls(service):
        out.setdefault(key, []).append((rowid, step, pid))
    return out


class Driver:
    def __init__(self, db: str, service: str, kills: int, seed: int, budget: float) -> None:
        self.db = db
        self.service = service
        self.target = kills
        self.rng = random.Random(seed)
        self.seed = seed
        self.budget = budget
        self.started = time.monotonic()
        self.prefix = f"chaos-{seed}"
        self.threads: list[str] = []
        self.runs = 0
        self.kills = 0
        self.finished_before_kill = 0
        self.phases: Counter[str] = Counter()
        self.cut_off: Counter[str] = Counter()
        self.cut_off_unreconciled: set[tuple[str, int]] = set()
        self.pauses: set[tuple[str, int]] = set()
        self.waiting_checks: list[dict[str, Any]] = []
        self.resolved: Counter[str] = Counter()
        self.busy_retries = 0
        self.busy_polls = 0
        self.errors: list[str] = []
        self.violations: list[str] = []
        self.threads_at_fork_max = 0

    # one run --------------------------------------------------------------------------------

    def _delay(self, snap: Snapshot) -> float:
        """Kill delay: uniform over a bit more than the run's expected length, so kills
        fall before, inside and after effects, and some runs finish first."""
        expected = RUN_OVERHEAD + STAGE_TIME * snap.stages_left
        return self.rng.uniform(0.0, 1.1 * expected)

    def _run(
        self, thread: str, action: dict[str, Any], kill_after: float | None, before: Snapshot
    ) -> ChildResult:
        self.threads_at_fork_max = max(self.threads_at_fork_max, threading.active_count())
        t0 = time.monotonic()
        res = _run_child(self.db, thread, action, self.rng.getrandbits(32), kill_after)
        self.runs += 1
        phase = None
        if res.killed:
            self.kills += 1
            phase = self._classify(thread, before, res.pid)
        else:
            if kill_after is not None:
                self.finished_before_kill += 1
            report = res.report or {}
            self.busy_retries += int(report.get("busy_retries", 0))
            self.busy_polls += int(report.get("busy_polls", 0))
            if res.exit_code != 0 or "error" in report:
                self.errors.append(
                    f"{thread} {action['kind']}: exit {res.exit_code}: "
                    f"{report.get('error')}\n{report.get('traceback', '')}"
                )
        if DEBUG:
            shown = res.report and {k: v for k, v in res.report.items() if k != "traceback"}
            print(
                f"{thread} {action['kind']} stages_left={before.stages_left} "
                f"status={before.status} delay={kill_after and round(kill_after, 3)} "
                f"took={time.monotonic() - t0:.3f} killed={res.killed} phase={phase} "
                f"report={shown}",
                file=sys.stderr,
            )
        return res

    def _classify(self, thread: str, before: Snapshot, pid: int) -> str:
        after = _inspect(self.db, thread)
        service = _service_by_key(self.service)
        cut = [
            key
            for key, row in after.ledger.items()
            if row[1] == "started" and before.ledger.get(key) != row
        ]
        called = [k for k in cut if any(p == pid for _, _, p in service.get(k, []))]
        for key in cut:
            step, _, calls = after.ledger[key]
            kind = "reconciled" if step in chaos_task.RECONCILED else "unreconciled"
            self.cut_off[kind] += 1
            if kind == "unreconciled":
                self.cut_off_unreconciled.add((key, calls))
        if called:
            phase = "in_effect_after_call"
        elif cut:
            phase = "in_effect_before_call"
        elif after.ledger != before.ledger or not _effects_left(before):
            phase = "after_effect"
        else:
            phase = "before_effect"
        self.phases[phase] += 1
        return phase

    # the person -----------------------------------------------------------------------------

    def _person(self, thread: str, snap: Snapshot, kill: bool) -> bool:
        """Settle the cut-off effects the thread waits for. False if none needs a person
        (a resolution that was itself killed after settling: a plain resume continues)."""
        keys = [w["key"] for w in snap.waiting if w.get("kind") == "effect"]
        open_keys = [k for k in keys if snap.ledger.get(k, ("", "", 0))[1] == "started"]
        for w in snap.waiting:
            if w.get("kind") == "effect" and w.get("step") in chaos_task.RECONCILED:
                self.violations.append(f"{thread}: paused on reconciled effect {w}")
        if not open_keys:
            return False
        key = open_keys[0]
        step, _, calls = snap.ledger[key]
        self.pauses.add((key, calls))
        before_calls = len(_service_by_key(self.service).get(key, []))
        statuses = []
        for _ in range(2):
            res = self._run(thread, {"kind": "resume"}, None, snap)
            statuses.append((res.report or {}).get("status"))
        after = _inspect(self.db, thread)
        after_calls = len(_service_by_key(self.service).get(key, []))
        check = {
            "thread": thread,
            "key": key,
            "step": step,
            "ledger_calls": calls,
            "service_calls_before": before_calls,
            "service_calls_after": after_calls,
            "statuses": statuses,
            "ledger_after": after.ledger.get(key, ("", "", 0))[1],
        }
        self.waiting_checks.append(check)
        if statuses != ["waiting_user", "waiting_user"] or after_calls != before_calls:
            self.violations.append(f"effect called or thread moved while waiting: {check}")
        if after.ledger.get(key) != snap.ledger[key]:
            self.violations.append(f"ledger row changed while waiting: {check}")
        found = chaos_task.lookup(self.service, key)
        if found is not None:
            action = {"kind": "resolve", "key": key, "outcome": "succeeded", "result": found}
        else:
            action = {"kind": "resolve", "key": key, "outcome": "retry"}
        self.resolved[action["outcome"]] += 1
        self._run(thread, action, self._delay(after) if kill else None, after)
        return True

    # the loop -------------------------------------------------------------------------------

    def _new_thread(self) -> str:
        thread = f"{self.prefix}-{len(self.threads)}"
        self.threads.append(thread)
        return thread

    def _advance(self, thread: str, kill: bool) -> bool:
        """One step of driving ``thread``; True once it is completed."""
        snap = _inspect(self.db, thread)
        if snap.status == "completed":
            return True
        if snap.status == "waiting_user" and self._person(thread, snap, kill):
            return False
        if snap.status == "failed":
            self.errors.append(f"{thread} failed (resuming it)")
        self._run(thread, {"kind": "run"}, self._delay(snap) if kill else None, snap)
        return False

    def run(self) -> dict[str, Any]:
        thread = self._new_thread()
        while self.kills < self.target:
            if time.monotonic() - self.started > self.budget:
                self.errors.append(f"time budget of {self.budget}s spent after {self.kills} kills")
                break
            if self._advance(thread, kill=True):
                thread = self._new_thread()
        # no more kills: finish the thread in flight (a fresh one that never ran is dropped)
        if _inspect(self.db, thread).status is None:
            self.threads.remove(thread)
        else:
            for _ in range(50):
                if self._advance(thread, kill=False):
                    break
            else:
                self.errors.append(f"{thread} did not complete after the kills")
        return self.figures()

    def figures(self) -> dict[str, Any]:
        service = _service_by_key(self.service)
        per_key = {k: len(v) for k, v in service.items()}
        missing = sorted(self.cut_off_unreconciled - self.pauses)
        if missing:
            self.violations.append(f"cut-off effects without reconciler never paused: {missing}")
        return {
            "backend": "postgres" if self.db.startswith("postgres") else "sqlite",
            "seed": self.seed,
            "runs": self.runs,
            "kills": self.kills,
            "finished_before_kill": self.finished_before_kill,
            "threads": len(self.threads),
            "thread_ids": self.threads,
            "kills_by_phase": dict(sorted(self.phases.items())),
            "cut_off_effects": dict(sorted(self.cut_off.items())),
            "waiting_user_pauses": len(self.pauses),
            "resolutions": dict(sorted(self.resolved.items())),
            "waiting_checks": self.waiting_checks,
            "service_calls": sum(per_key.values()),
            "calls_per_key_max": max(per_key.values(), default=0),
            "busy_retries": self.busy_retries,
            "busy_polls": self.busy_polls,
            "threads_at_fork_max": self.threads_at_fork_max,
            "errors": self.errors,
            "violations": self.violations,
            "duration": round(time.monotonic() - self.started, 2),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--service", required=True, help="the service's SQLite file")
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget", type=float, default=150.0, help="seconds for the kills")
    args = parser.parse_args(argv)
    os.environ[chaos_task.SERVICE_ENV] = args.service
    chaos_task.connect(args.service).close()  # the table exists before any child runs
    figures = Driver(args.db, args.service, args.kills, args.seed, args.budget).run()
    print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
