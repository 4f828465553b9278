"""The notifications' outbox: one row per notice owed, made by a trigger on the event that
tells of the moment (migration 20), so it commits with that event and the checkpoint it
describes; the run core's ``Notifier`` claims, delivers and settles it.

A row holds its receivers (``receivers``, JSON): those its thread's run recorded when it
started (``notify_enable``), copied by the trigger, so whichever process delivers it sends
it where the thread was configured to, not to its own ``$LONGTASK_NOTIFY``; NULL on rows
stored before migration 27 (the delivering process's configuration then decides).

A row is claimed for one attempt (``due`` moved past the attempt's longest time), so two
processes never deliver it at once and one that died mid-attempt leaves it due again when
the claim lapses; it is settled ``sent`` (every target took it), retried at a later
``due``, ``failed`` (given up) or ``none`` (nothing to tell it to). A reminder of an
unanswered pause is a row of the same event with the next ``reminder`` number, inserted
once (its primary key) whichever process finds it due.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

#: the events that make a pause notice (reminders repeat these)
PAUSE_EVENT_KINDS: tuple[str, ...] = (
    "approval.required",
    "wait.started",
    "interrupt.required",
    "budget.exceeded",
    "fix.exhausted",
    "effect.unknown",
)

_COLS = (
    "n.event_id, n.reminder, n.thread_id, n.kind, n.step, n.created_at, n.due, n.attempts, "
    "n.state, n.sent, n.settled_at, n.receivers"
)


@dataclass(frozen=True)
class Notification:
    """An outbox row, with the event it tells of."""

    event_id: int
    reminder: int
    thread_id: str
    #: the event's kind (``approval.required``...)
    kind: str
    step: str | None
    created_at: float
    due: float
    attempts: int
    #: None while owed; 'sent', 'failed' or 'none'
    state: str | None
    #: digests of the URLs that took it
    sent: tuple[str, ...]
    settled_at: float | None
    #: where it goes: ``{"to": [{"urls", "step", "on"}, ...], "signed": env name or
    #: None}`` as its thread's run recorded it (None: a row from before migration 27)
    receivers: dict[str, Any] | None = None
    #: the event: its stage, attempt, data and time
    stage: str | None = None
    attempt: int | None = None
    data: dict[str, Any] | None = None
    ts: float | None = None


def _row(r: tuple[Any, ...]) -> Notification:
    extra: dict[str, Any] = {}
    if len(r) > 12:
        extra = {
            "stage": r[12],
            "attempt": r[13],
            "data": json.loads(r[14]) if isinstance(r[14], str) else r[14],
            "ts": float(r[15]),
        }
    return Notification(
        event_id=int(r[0]),
        reminder=int(r[1]),
        thread_id=r[2],
        kind=r[3],
        step=r[4],
        created_at=float(r[5]),
        due=float(r[6]),
        attempts=int(r[7]),
        state=r[8],
        sent=tuple(json.loads(r[9])) if r[9] else (),
        settled_at=float(r[10]) if r[10] is not None else None,
        receivers=json.loads(r[11]) if r[11] else None,
        **extra,
    )


class NotifyTables:
    """The notifications' outbox, mixed into Store."""

    _run: Any

    def notify_enable(self, thread_id: str, receivers: dict[str, Any]) -> None:
        """The thread's events make notifications from now on, to ``receivers`` (its run
        found some configured: the task's or a step's ``notify``, or ``$LONGTASK_NOTIFY``);
        the trigger copies them into each notice. A write only when they change."""
        to = json.dumps(receivers, sort_keys=True, separators=(",", ":"))
        self._run(
            "UPDATE longtask_threads SET notify = 1, notify_to = ? WHERE thread_id = ? "
            "AND (notify IS NULL OR notify_to IS NULL OR notify_to <> ?)",
            (to, thread_id, to),
        )

    def notify_due(self, now: float, limit: int = 20) -> list[tuple[int, int]]:
        """Notifications owed and due (never tried, a retry's time, or a lapsed claim),
        oldest first: (event id, reminder)."""
        rows = self._run(
            "SELECT event_id, reminder FROM longtask_notifications WHERE state IS NULL "
            "AND due <= ? ORDER BY created_at, event_id, reminder LIMIT ?",
            (now, limit),
        )
        return [(int(r[0]), int(r[1])) for r in rows]

    def notify_claim(
        self, event_id: int, reminder: int, now: float, until: float
    ) -> Notification | None:
        """Take one attempt at a due notification until ``until``, with its event; None if
        another process took or settled it meanwhile."""
        taken = self._run(
            "UPDATE longtask_notifications SET due = ? WHERE event_id = ? AND reminder = ? "
            "AND state IS NULL AND due <= ? RETURNING event_id",
            (until, event_id, reminder, now),
        )
        if not taken:
            return None
        rows = self._run(
            f"SELECT {_COLS}, e.stage, e.attempt, e.data, e.ts FROM longtask_notifications n "
            "JOIN longtask_events e ON e.id = n.event_id "
            "WHERE n.event_id = ? AND n.reminder = ?",
            (event_id, reminder),
        )
        if not rows:  # the event was pruned with its history: nothing left to tell
            self.notify_settle(event_id, reminder, 0, (), state="none", retry_at=None)
            return None
        return _row(rows[0])

    def notify_settle(
        self,
        event_id: int,
        reminder: int,
        attempts: int,
        sent: tuple[str, ...],
        *,
        state: str | None,
        retry_at: float | None,
    ) -> None:
        """Record an attempt: ``state`` 'sent', 'failed' or 'none', or None with the time
        of the next attempt."""
        self._run(
            "UPDATE longtask_notifications SET attempts = ?, sent = ?, state = ?, due = ?, "
            "settled_at = ? WHERE event_id = ? AND reminder = ?",
            (
                attempts,
                json.dumps(list(sent)) if sent else None,
                state,
                retry_at if retry_at is not None else 0,
                time.time() if state is not None else None,
                event_id,
                reminder,
            ),
        )

    def notify_park(self, event_id: int, reminder: int, now: float, due: float) -> bool:
        """Put back a claimed notification (none of its receivers free in this process),
        due at ``due``; whether it was still owed."""
        rows = self._run(
            "UPDATE longtask_notifications SET due = ? WHERE event_id = ? AND reminder = ? "
            "AND state IS NULL AND due > ? RETURNING event_id",
            (due, event_id, reminder, now),
        )
        return bool(rows)

    def notify_hurry(self, event_id: int, reminder: int, parked: float, now: float) -> None:
        """Make a notification parked until ``parked`` due ``now`` (the lane it waited for
        is free), unless another process claimed or settled it since."""
        self._run(
            "UPDATE longtask_notifications SET due = ? WHERE event_id = ? AND reminder = ? "
            "AND state IS NULL AND due = ?",
            (now, event_id, reminder, parked),
        )

    def notify_unanswered(self, limit: int = 100) -> list[Notification]:
        """The latest notice of each pause of a thread that still waits, once it was sent:
        the candidates for a reminder (the caller checks the pause is still open and its
        ``remind_after`` has passed)."""
        kinds = ", ".join("?" for _ in PAUSE_EVENT_KINDS)
        rows = self._run(
            f"SELECT {_COLS} FROM longtask_notifications n "
            "JOIN longtask_threads t ON t.thread_id = n.thread_id "
            f"WHERE n.kind IN ({kinds}) AND n.state = 'sent' "
            "AND t.status IN ('waiting_user', 'waiting_external') "
            "AND NOT EXISTS (SELECT 1 FROM longtask_notifications m "
            "WHERE m.event_id = n.event_id AND m.reminder > n.reminder) "
            # a later pause of the same step (asked again) has its own reminders
            "AND NOT EXISTS (SELECT 1 FROM longtask_notifications o "
            "WHERE o.thread_id = n.thread_id AND o.step = n.step AND o.event_id > n.event_id) "
            "ORDER BY n.settled_at LIMIT ?",
            (*PAUSE_EVENT_KINDS, limit),
        )
        return [_row(r) for r in rows]

    def notify_remind(self, n: Notification, now: float) -> bool:
        """Owe reminder ``n.reminder + 1`` of ``n``'s event (once, whoever asks first);
        whether this call made it."""
        rows = self._run(
            "INSERT INTO longtask_notifications (event_id, reminder, thread_id, kind, step, "
            "created_at, receivers) VALUES (?,?,?,?,?,?,?) "
            "ON CONFLICT (event_id, reminder) DO NOTHING RETURNING event_id",
            (
                n.event_id,
                n.reminder + 1,
                n.thread_id,
                n.kind,
                n.step,
                now,
                # a reminder goes where the notice it repeats went
                json.dumps(n.receivers, sort_keys=True) if n.receivers is not None else None,
            ),
        )
        return bool(rows)

    def notifications(self, thread_id: str) -> list[Notification]:
        """A thread's notifications, oldest first (what ``longtask events`` does not show:
        what is still owed)."""
        rows = self._run(
            f"SELECT {_COLS} FROM longtask_notifications n WHERE n.thread_id = ? "
            "ORDER BY n.event_id, n.reminder",
            (thread_id,),
        )
        return [_row(r) for r in rows]
