"""Chaos test of the side-effect ledger: 100 SIGKILLs at random points (before, during and
after effects), across many runs and threads, each thread resumed until done (both
backends).

``chaos_task.py`` is a task of 10 steps (5 stages of 2 parallel steps), each doing one
effect against an outside "service" that records every call by idempotency key; even steps
pass a reconciler, odd ones do not. ``chaos_driver.py`` (a subprocess) forks one child per
run and kills it with SIGKILL after a random delay, acts as the person when a cut-off call
without reconciler pauses the thread, and prints its figures as one JSON line.

Afterwards, from the database and the service:

- every thread completed, and every effect key has exactly one ``succeeded`` ledger row
  (10 per thread, one per step);
- the service recorded exactly one call per key (at most one is the promise; exactly one
  because every result came from a real call), so in particular at most one for the
  reconciled effects;
- effects without a reconciler that died mid-call paused the thread (``waiting_user``,
  ``effect.unknown``), and resuming it while it waited neither moved it nor called the
  service: only a person's ``effects resolve`` continued it;
- each step's result is the ledger's result, which is the service's record of the call.

``LT_CHAOS_SEED`` sets the driver's seed (the kill delays); timing makes every run differ.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import chaos_task

from longtask import Runner

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "chaos_driver.py"
KILLS = 100
SEED = int(os.environ.get("LT_CHAOS_SEED", "20250"))


def _drive(db_url: str, service: Path, record_property: Any) -> dict[str, Any]:
    proc = subprocess.run(
        [
            sys.executable,
            str(DRIVER),
            "--db",
            db_url,
            "--service",
            str(service),
            "--kills",
            str(KILLS),
            "--seed",
            str(SEED),
        ],
        env={**os.environ, chaos_task.SERVICE_ENV: str(service)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    shown = {k: v for k, v in figures.items() if k not in ("thread_ids", "waiting_checks")}
    print(f"\nchaos figures: {json.dumps(shown)}")
    # shown in the run's summary too, also under xdist (see conftest.py)
    record_property("figures", json.dumps(shown))
    return figures


def test_random_kills_never_repeat_an_effect(
    db_url: str, tmp_path: Path, record_property: Any
) -> None:
    service = tmp_path / "service.db"
    figures = _drive(db_url, service, record_property)

    # the driver's own observations
    assert figures["errors"] == [], figures["errors"]
    assert figures["violations"] == [], figures["violations"]
    assert figures["kills"] == KILLS
    phases = figures["kills_by_phase"]
    for phase in ("before_effect", "in_effect_before_call", "in_effect_after_call"):
        assert phases.get(phase, 0) > 0, f"no kill landed {phase}: {phases}"
    assert phases.get("after_effect", 0) > 0, phases
    assert figures["cut_off_effects"].get("reconciled", 0) > 0, figures
    assert figures["waiting_user_pauses"] > 0, figures
    for check in figures["waiting_checks"]:
        # resumed twice while waiting: still waiting, the service was not called
        assert check["statuses"] == ["waiting_user", "waiting_user"], check
        assert check["service_calls_after"] == check["service_calls_before"] <= 1, check
        assert check["ledger_after"] == "started", check
        assert check["step"] not in chaos_task.RECONCILED, check

    calls = chaos_task.service_calls(service)
    per_key = Counter(key for _, key, _, _ in calls)
    row_of = {key: rowid for rowid, key, _, _ in calls}
    paused = {c["key"] for c in figures["waiting_checks"]}
    threads = figures["thread_ids"]
    assert len(threads) == figures["threads"] >= 2

    ledger_keys: set[str] = set()
    with Runner(db_url) as runner:
        assert {t.thread_id for t in runner.threads(limit=10_000)} == set(threads)
        for thread in threads:
            assert runner.status(thread).status == "completed", thread
            rows = runner.effects(thread)
            # one effect per step, each succeeded exactly once (the key is the ledger's
            # primary key: one row per key)
            assert sorted(r.step for r in rows) == sorted(chaos_task.STEPS), (thread, rows)
            assert len({r.key for r in rows}) == len(rows) == len(chaos_task.STEPS)
            assert all(r.status == "succeeded" for r in rows), (thread, rows)
            results = runner.results(thread)
            for r in rows:
                ledger_keys.add(r.key)
                # at most once per key; exactly once, since each result came from a call
                assert per_key[r.key] == 1, (thread, r.step, r.key, per_key[r.key])
                # the ledger holds the service's record of the call...
                assert r.result == chaos_task.record(row_of[r.key], r.key, r.step), r
                # ...and the step's result is what the ledger recorded
                assert results[r.step] == {"step": r.step, "effect": r.result}, r
            events = runner.events(thread)
            unknown = {e.data["key"] for e in events if e.kind == "effect.unknown"}
            resolved = {e.data["key"] for e in events if e.kind == "manual.resolve"}
            steps_of = {r.key: r.step for r in rows}
            # only effects without a reconciler paused, and only those a person settled
            assert not {steps_of[k] for k in unknown} & chaos_task.RECONCILED, thread
            assert paused & set(steps_of) <= unknown, thread
            assert resolved <= unknown, thread
    # no call the ledger does not know of, and the figures agree with the service
    assert set(per_key) == ledger_keys
    assert figures["calls_per_key_max"] == max(per_key.values()) == 1
    assert figures["service_calls"] == len(calls) == len(threads) * len(chaos_task.STEPS)
