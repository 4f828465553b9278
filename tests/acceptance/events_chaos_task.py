"""The task of the event crash test (``test_events_chaos.py``): function steps with effects,
an agent step whose model calls go to the scripted server, then more function steps.

Shape: ``step1 ∥ step2`` (each: a counted call, a reconciled effect against the chaos
service of ``chaos_task``, a little sleep either side), then the agent ``notes`` (4 model
calls asking for the read-only ``lookup`` tool, a 5th that answers; the server answers
each after a short delay, so kills land inside model calls), then ``step3 ∥ step4`` like
the first stage.

A function step returns ``{"step": name, "call": <its counter row>, "effect": <effect
result>}``: the counter row of the run whose result was committed, so the test can tell
that no run of the step started after its result was stored.

Environment: ``$LT_CHAOS_SERVICE`` (the service, see ``chaos_task``), ``$LT_EVCHAOS_COUNTER``
(the counter: one SQLite row per step call) and ``$LT_EVCHAOS_MARKS`` (a directory; each
process appends ``ts phase`` lines to a file named by its pid, so the driver can tell where a
kill landed).
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import chaos_task

from longtask import LongTask, Prompt, Stage, StepContext, agent_step, function_step

COUNTER_ENV = "LT_EVCHAOS_COUNTER"
MARKS_ENV = "LT_EVCHAOS_MARKS"
#: named like chaos_task's steps, whose service records their number
FUNCTION_STEPS = ["step1", "step2", "step3", "step4"]
AGENT = "notes"
#: model calls the agent makes (the last one answers)
TURNS = 5
#: seconds the scripted server waits before each answer
MODEL_DELAY = 0.06
BEFORE_EFFECT = (0.02, 0.05)
AFTER_EFFECT = (0.02, 0.05)
#: inside the effect, before the service's own call (which naps on either side of its row)
IN_EFFECT = (0.01, 0.03)


def mark(phase: str) -> None:
    """Note where this process is (the driver reads it after a kill)."""
    where = os.environ.get(MARKS_ENV)
    if where:
        with open(Path(where) / str(os.getpid()), "a") as f:
            f.write(f"{time.time():.6f} {phase}\n")


def marks(directory: str | Path, pid: int) -> list[tuple[float, str]]:
    path = Path(directory) / str(pid)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        ts, _, phase = line.partition(" ")
        if phase:
            out.append((float(ts), phase))
    return out


def _counter(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS calls (step TEXT NOT NULL, pid INTEGER NOT NULL, "
        "thread TEXT NOT NULL)"
    )
    return conn


def count_call(step: str, thread: str) -> int:
    """Record one call of ``step`` (committed before the step goes on); its row id."""
    conn = _counter(os.environ[COUNTER_ENV])
    try:
        cur = conn.execute(
            "INSERT INTO calls (step, pid, thread) VALUES (?, ?, ?)", (step, os.getpid(), thread)
        )
        return int(cur.lastrowid or 0)
    finally:
        conn.close()


def counted_calls(path: str | Path) -> list[tuple[int, str, str, int]]:
    """Every recorded call: (row id, thread, step, pid)."""
    if not Path(path).exists():
        return []
    conn = _counter(path)
    try:
        return [
            (int(r), str(t), str(s), int(p))
            for r, t, s, p in conn.execute("SELECT rowid, thread, step, pid FROM calls")
        ]
    finally:
        conn.close()


def _effect_call(step: str, idempotency_key: str) -> dict[str, Any]:
    mark(f"effect:{step}:in")
    time.sleep(random.uniform(*IN_EFFECT))
    out = chaos_task.service_call(step, idempotency_key)
    mark(f"effect:{step}:out")
    return out


def _make(name: str) -> Any:
    def run(ctx: StepContext) -> dict[str, Any]:
        mark(f"step:{name}:in")
        call = count_call(name, ctx.thread_id)
        time.sleep(random.uniform(*BEFORE_EFFECT))
        result = ctx.effect("call", _effect_call, name, reconcile=chaos_task.find_call)
        time.sleep(random.uniform(*AFTER_EFFECT))
        mark(f"step:{name}:out")
        return {"step": name, "call": call, "effect": result}

    run.__name__ = run.__qualname__ = f"evchaos_{name}"
    return function_step(run, name=name)


def lookup(topic: str) -> str:
    """Look a topic up (changes nothing)."""
    return f"facts about {topic}"


notes = agent_step(
    AGENT,
    prompt=Prompt(name="notes", version="1", template="Take notes on {inputs[subject]}."),
    tools=[lookup],
    read_only_tools=["lookup"],
)

task = LongTask(
    name="events_chaos",
    version="1",
    stages=[
        Stage("prep", [_make("step1"), _make("step2")]),
        Stage("research", [notes]),
        Stage("finish", [_make("step3"), _make("step4")]),
    ],
)
