"""Chaos test of workers (PostgreSQL, real processes): 3 ``longtask worker`` processes run
50 threads of 10 steps, each step doing one reconciled effect, while a controller SIGKILLs
a random worker (of those serving already, not one still starting) about every 2 s (at most
``MAX_KILLS`` times) and starts a replacement under a new name, until every thread has
completed.

Then, from the database, the outside service and the steps' own trace (see
``worker_chaos_task``):

- every thread completed, with each step's result being the service's call of its key;
- every effect key has exactly one ``succeeded`` ledger entry, and the service recorded
  exactly one call per key (at most once, and nothing lost);
- only steps cut off by a kill ran again: every run of a step but the last was by a killed
  worker, and there are no more re-runs than kills;
- one writer per thread: within a thread, the runs of steps (from their start to their end,
  or to the kill of their process) never overlap, whichever workers ran them.

The figures are printed and recorded (``record_property("figures", ...)``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from longtask import Runner

HERE = Path(__file__).resolve().parent
TASK_REF = f"{HERE}/worker_chaos_task.py:task"

THREADS = 50
WORKERS = 3
STALLED_AFTER = 1.5
KILL_EVERY = (1.5, 2.5)  # seconds between kills (uniform)
#: kills at most: enough to cut off steps many times, few enough that the fleet always gets
#: the work done, however slowly the machine starts a worker (a busy CI runner takes seconds)
MAX_KILLS = 15
RUN_BUDGET = 300.0  # seconds for every thread to complete: a hang, not a speed limit
SEED = int(os.environ.get("LT_WCHAOS_SEED", "0")) or random.randrange(1, 1 << 30)


@dataclass
class WorkerProc:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    killed_at: float | None = None


class Fleet:
    """The worker processes: start, kill, and clean up."""

    def __init__(self, pg_url: str, env: dict[str, str], logs: Path) -> None:
        self.env = {**os.environ, "LONGTASK_DB": pg_url, **env}
        self.logs = logs
        self.all: list[WorkerProc] = []

    def start(self) -> WorkerProc:
        name = f"w{len(self.all) + 1}"
        log = self.logs / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "longtask",
                    "worker",
                    "--stalled-after",
                    str(STALLED_AFTER),
                    "--name",
                    name,
                ],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        w = WorkerProc(name, proc, log)
        self.all.append(w)
        return w

    @property
    def alive(self) -> list[WorkerProc]:
        return [w for w in self.all if w.killed_at is None and w.proc.poll() is None]

    def kill(self, w: WorkerProc) -> float:
        """SIGKILL ``w``; returns the time by which it was certainly dead."""
        w.proc.kill()
        w.proc.wait(10)
        w.killed_at = time.time()
        return w.killed_at

    def exited(self) -> list[WorkerProc]:
        """Workers that died on their own (not killed by us)."""
        return [w for w in self.all if w.killed_at is None and w.proc.poll() is not None]

    def cleanup(self) -> None:
        for w in self.all:
            if w.proc.poll() is None:
                w.proc.kill()
        for w in self.all:
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.proc.wait(10)

    def tails(self, lines: int = 15) -> str:
        out = []
        for w in self.all:
            text = w.log.read_text(errors="replace").splitlines() if w.log.exists() else []
            out.append(f"--- {w.name} (pid {w.proc.pid}, killed={w.killed_at is not None})")
            out.extend(text[-lines:])
        return "\n".join(out)


def _progress(pg_url: str) -> tuple[int, set[str]]:
    """Threads completed, and the names of workers that have started serving (they
    heartbeat once they are up; a worker still importing is not worth a kill)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM longtask_threads WHERE status = 'completed'"
        ).fetchone()
        names = {str(r[0]) for r in conn.execute("SELECT name FROM longtask_workers")}
    return (int(row[0]) if row else 0), names


def _overlaps(runs: list[tuple[str, int, float, float]]) -> list[str]:
    """Pairs of runs of one thread that overlap in time: (step, pid, start, end) sorted by
    start; a run must start after every earlier run of the thread has ended."""
    found = []
    latest: tuple[str, int, float, float] | None = None
    for run in runs:
        if latest is not None and run[2] < latest[3]:
            found.append(
                f"{run[0]} on pid {run[1]} started at {run[2]:.3f} while {latest[0]} on "
                f"pid {latest[1]} ran until {latest[3]:.3f}"
            )
        if latest is None or run[3] > latest[3]:
            latest = run
    return found


def test_workers_survive_random_kills(
    pg_url: str, tmp_path: Path, record_property: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import worker_chaos_task as wct

    rng = random.Random(SEED)
    service_path, trace_path = tmp_path / "service.db", tmp_path / "trace.db"
    env = {wct.SERVICE_ENV: str(service_path), wct.TRACE_ENV: str(trace_path)}
    for name, value in env.items():  # this process reads the ledger through the task too
        monkeypatch.setenv(name, value)
    wct.service(service_path).close()  # the tables exist before any worker runs
    wct.trace(trace_path).close()

    threads = [f"wc-{i:02d}" for i in range(THREADS)]
    with Runner(pg_url) as runner:
        for t in threads:
            runner.submit(wct.task, thread_id=t, task_ref=TASK_REF)

    fleet = Fleet(pg_url, env, tmp_path)
    kills: list[tuple[str, int, float]] = []  # (name, pid, dead by)
    started = time.time()
    done = 0
    try:
        for _ in range(WORKERS):
            fleet.start()
        next_kill = time.monotonic() + rng.uniform(*KILL_EVERY)
        while True:
            done, serving = _progress(pg_url)
            if done == THREADS:
                break
            if time.time() - started > RUN_BUDGET:
                pytest.fail(
                    f"only {done}/{THREADS} threads completed in {RUN_BUDGET:.0f}s "
                    f"(seed {SEED}, {len(kills)} kills)\n{fleet.tails()}"
                )
            gone = fleet.exited()
            if gone:
                pytest.fail(
                    f"workers exited on their own: {[w.name for w in gone]} (seed {SEED})\n"
                    + fleet.tails()
                )
            if len(kills) < MAX_KILLS and time.monotonic() >= next_kill:
                # Only a worker that serves: one still importing has nothing to cut off.
                ready = [w for w in fleet.alive if w.name in serving]
                if ready:
                    victim = rng.choice(ready)
                    kills.append((victim.name, victim.proc.pid, fleet.kill(victim)))
                    fleet.start()
                next_kill = time.monotonic() + rng.uniform(*KILL_EVERY)
            time.sleep(0.1)
        duration = time.time() - started
    finally:
        fleet.cleanup()

    # -- the evidence ---------------------------------------------------------------------
    killed_at = {pid: at for _, pid, at in kills}
    conn = wct.trace(trace_path)
    try:
        trace_rows = [
            (str(t), str(s), int(p), float(a), e)
            for t, s, p, a, e in conn.execute(
                "SELECT thread, step, pid, start, end FROM runs ORDER BY start"
            )
        ]
    finally:
        conn.close()
    conn = wct.service(service_path)
    try:
        calls = [
            (int(r), str(k), str(t), str(s))
            for r, k, t, s in conn.execute("SELECT rowid, key, thread, step FROM calls")
        ]
    finally:
        conn.close()
    calls_per_key = Counter(k for _, k, _, _ in calls)

    problems: list[str] = []
    runs_of: dict[tuple[str, str], list[tuple[int, float, float | None]]] = defaultdict(list)
    by_thread: dict[str, list[tuple[str, int, float, float]]] = defaultdict(list)
    for thread, step, pid, start, end in trace_rows:
        runs_of[(thread, step)].append((pid, start, end))
        if end is None:
            if pid not in killed_at:
                problems.append(f"{thread}/{step} on pid {pid} never ended, and was not killed")
                end = float("inf")
            else:
                end = killed_at[pid]
        by_thread[thread].append((step, pid, start, float(end)))

    ledger_rows = 0
    reconciled = 0
    effects_called_again = 0  # cut off before the service saw them: reconciled as not done
    step_started_events = 0
    takeovers: list[float] = []
    with Runner(pg_url) as runner:
        for t in threads:
            st = runner.status(t)
            if st.status != "completed":
                problems.append(f"{t} is {st.status}")
                continue
            effects = runner.effects(t)
            ledger_rows += len(effects)
            effects_called_again += sum(1 for e in effects if e.calls > 1)
            by_step = Counter(e.step for e in effects)
            if sorted(by_step) != sorted(wct.STEPS) or set(by_step.values()) != {1}:
                problems.append(f"{t}: ledger entries per step {dict(by_step)}")
            results = runner.results(t)
            for e in effects:
                if e.status != "succeeded":
                    problems.append(f"{t}/{e.step}: effect {e.key} is {e.status}")
                    continue
                first = wct.lookup(service_path, e.key)
                if e.result != first:
                    problems.append(f"{t}/{e.step}: ledger {e.result} != service {first}")
                if results.get(e.step, {}).get("effect") != e.result:
                    problems.append(f"{t}/{e.step}: result {results.get(e.step)} != ledger")
            events = runner.events(t)
            step_started_events += sum(1 for ev in events if ev.kind == "step.started")
            reconciled += sum(
                1 for ev in events if ev.kind == "effect.succeeded" and ev.data.get("reconciled")
            )
            completed_steps = {str(ev.step) for ev in events if ev.kind == "step.completed"}
            if completed_steps != set(wct.STEPS):
                problems.append(f"{t}: step.completed events for {sorted(completed_steps)}")
            problems.extend(f"{t}: {o}" for o in _overlaps(by_thread[t]))

    for key, n in calls_per_key.items():
        if n > 1:
            problems.append(f"the service was called {n} times for {key}")
    if len(calls_per_key) != THREADS * len(wct.STEPS):
        problems.append(f"the service saw {len(calls_per_key)} keys")

    reruns = 0
    for (thread, step), runs in runs_of.items():
        reruns += len(runs) - 1
        for pid, _, _ in runs[:-1]:
            # a run that is not the last one was cut off: only a kill may cut one off
            if pid not in killed_at:
                problems.append(f"{thread}/{step} ran again after a run on live pid {pid}")
        for (prev_pid, _, _), (_, start, _) in itertools.pairwise(runs):
            if prev_pid in killed_at:  # kill -> the step starts again on another worker
                takeovers.append(start - killed_at[prev_pid])
    if reruns > len(kills):
        problems.append(f"{reruns} re-runs of steps for {len(kills)} kills")
    if len(runs_of) != THREADS * len(wct.STEPS):
        problems.append(f"the trace has runs of {len(runs_of)} steps")

    killed_mid_step = sum(
        1 for _, pid, _ in kills if any(p == pid and e is None for _, _, p, _, e in trace_rows)
    )
    figures = {
        "seed": SEED,
        "threads": THREADS,
        "steps": THREADS * len(wct.STEPS),
        "duration_s": round(duration, 1),
        "steps_per_s": round(THREADS * len(wct.STEPS) / duration, 1),
        "kills": len(kills),
        "kills_mid_step": killed_mid_step,
        "workers_started": len(fleet.all),
        "step_runs": len(trace_rows),
        "re_executed_steps": sum(1 for runs in runs_of.values() if len(runs) > 1),
        "max_runs_per_step": max((len(r) for r in runs_of.values()), default=0),
        "step_started_events": step_started_events,
        "ledger_entries": ledger_rows,
        "reconciled_effects": reconciled,
        "effects_called_again": effects_called_again,
        "service_calls": len(calls),
        "max_calls_per_key": max(calls_per_key.values(), default=0),
        "takeover_s_median": round(statistics.median(takeovers), 2) if takeovers else None,
        "takeover_s_max": round(max(takeovers), 2) if takeovers else None,
        "overlaps": sum(1 for p in problems if "while" in p),
        "problems": len(problems),
    }
    print("\nworker chaos figures: " + json.dumps(figures))
    record_property("figures", json.dumps(figures))
    assert not problems, f"seed {SEED}:\n" + "\n".join(problems[:50])
    assert figures["max_calls_per_key"] == 1
    assert figures["kills"] >= 2, "the work was done before the chaos began"
