"""What a run records when it takes over a thread whose last run died.

A thread found ``running`` by a process that has just taken its lock (or lease) was being
advanced by a process that stopped without settling it: killed, crashed, its machine gone.
The steps it was running started (their ``step.started`` and progress are in the log: they
are stored while a step runs) and never ended. Before the new run starts, one transaction
stores ``longtask.recovered``, a ``step.abandoned`` for each such step, and moves each one's
durable attempt count on, so the attempt that runs next is numbered after the dead one
(``step.started`` #2) instead of claiming to be the first. The dead attempt does not use up
a retry: it did not fail, its process did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from longtask.store import NO_ITEM, Attempts, NewEvent, attempt_statement
from longtask.store._kinds import LIVE_KINDS

if TYPE_CHECKING:
    from longtask.steps import StepEnv
    from longtask.store import Event, Store

#: a step's events that say how its latest attempt stands
_ENDS = ("step.completed", "step.failed", "step.skipped", "step.abandoned")
#: a step that says it waits (a back-off, a person, an outside event) has no attempt running
_WAITS = ("step.retry", "approval.required", "wait.started")
_KINDS = ("step.started", *_WAITS, *_ENDS, *(k for k in LIVE_KINDS if k != "stage.started"))


def open_steps(events: list[Event]) -> dict[str, Event]:
    """The steps whose latest attempt started and did not end, with its ``step.started``.
    A step whose last word is a ``step.retry`` was waiting out a back-off (no attempt ran;
    the next run waits out the rest) unless it reported work after it; an approval or a
    wait that asked (``approval.required``, ``wait.started``) waits, it does not run."""
    started: dict[str, Event] = {}
    running: set[str] = set()
    for e in events:
        if e.step is None:
            continue
        if e.kind in ("step.failed", "step.retry") and "item" in e.data:
            # a map item's failure: the map step goes on with its other items
            if e.step in started:
                running.add(e.step)
            continue
        if e.kind == "step.started":
            started[e.step] = e
            running.add(e.step)
        elif e.kind in _ENDS or e.kind in _WAITS:
            running.discard(e.step)
        elif e.step in started:
            running.add(e.step)
    return {step: started[step] for step in running}


def recover(store: Store, env: StepEnv, thread_id: str, run: int) -> list[str]:
    """Record that the thread's previous run died (see the module docstring); returns the
    steps whose attempts it abandoned."""
    dead = open_steps(store.events(thread_id, kinds=_KINDS))
    counts = store.attempts(thread_id)
    statements = []
    events: list[NewEvent] = []
    abandoned = []
    for step, started in sorted(dead.items(), key=lambda kv: kv[1].id):
        prior = counts.get((step, NO_ITEM))
        failed = prior.failed if prior else 0
        # The attempt that died is the one its step.started numbered: the count may be
        # gone (an attempt that succeeded forgets it before its checkpoint is stored, and
        # the process can die between the two), and then it is not failed + 1.
        attempt = max(failed + 1, started.attempt or 0)
        used = failed - prior.window_start if prior else 0
        # one more attempt counted, and the retry window moved with it: the next attempt
        # has as many retries left as the dead one had
        record = Attempts(attempt, attempt - used, None)
        statements.append(attempt_statement(thread_id, step, NO_ITEM, record))
        events.append(
            NewEvent(
                thread_id,
                "step.abandoned",
                f"{run}/step.abandoned/{step}/{attempt}",
                stage=started.stage,
                step=step,
                attempt=attempt,
                data={
                    "reason": "the process running this attempt stopped before it ended",
                    "started_event": started.id,
                    "next_attempt": attempt + 1,
                },
            )
        )
        abandoned.append(step)
    env.events.put(
        NewEvent(
            thread_id,
            "longtask.recovered",
            f"{run}/longtask.recovered",
            data={
                "reason": "the thread was running with no process advancing it: the run "
                "that held it stopped without ending",
                "run": run,
                "abandoned": abandoned,
            },
        )
    )
    for event in events:
        env.events.put(event)
    env.events.commit_with(thread_id, statements)
    return abandoned
