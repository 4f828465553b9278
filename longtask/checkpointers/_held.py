"""Group commit: a task's writes wait a moment for the checkpoint that follows them.

In a run, LangGraph stores each task's writes (``put_writes``, from a worker thread as the
task returns) and then, once the super-step is over, the checkpoint that applies them
(``put``). Committed apart, that is two transactions — two WAL flushes on PostgreSQL — per
step of a chain. So the writes of tasks on a *live* checkpoint (one this process stored for a
run that goes on: metadata source ``input`` or ``loop``) are held, for up to ``HOLD`` seconds
after the first of them: the ``put`` of the checkpoint's child takes them into its own
transaction. If none comes in time (a step still runs beside them), a flusher thread commits
them on their own, as before. Special writes (an error, an interrupt, a resume) are never
held: they end a super-step with no checkpoint after it, and they carry the held writes of
their checkpoint into their own transaction.

``put_writes`` returns without waiting (a waiting call would hold one of the run's worker
threads, and with ``max_concurrency=1`` the ``put`` it waits for would queue behind it). A
crash while writes are held loses them with the steps that made them, exactly as a crash a
moment earlier, inside those steps, would: they run again on resume (their effects are kept
by the ledger). Every read of a thread's checkpoints first commits what is held for it, so
readers see each write ``put_writes`` was given; so do the end of a Runner's run and closing
the database. A held write whose transaction fails for a lost connection is held again
(``restore``), as the saver gives the events of that transaction back to the outbox: what
was to commit together stays together, so the events that tell of a step's result (its
``step.completed``) are never stored by a later transaction without the result. A lease
lost drops them (another process redoes that work).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger("longtask.checkpointers")

#: how long a task's writes wait for the checkpoint after them (seconds): LangGraph stores
#: that checkpoint right after the super-step's last task returns (well under a millisecond
#: of work for a small graph, a few for a task of thousands of steps)
HOLD = 0.02
#: live checkpoints remembered, one per (thread, namespace)
_LIVE = 4096
#: how long writes given back after a failed transaction wait before the flusher tries again
RETRY = 1.0

Key = tuple[str, str, str]  # thread, namespace, checkpoint id


class Held:
    """One ``put_writes`` call's rows; ``upsert``: special writes, which replace an earlier
    one of the task (ordinary writes are kept as first stored)."""

    __slots__ = ("key", "rows", "upsert")

    def __init__(self, upsert: bool, rows: Sequence[tuple[Any, ...]], key: Key) -> None:
        self.upsert = upsert
        self.rows = rows
        #: the checkpoint the writes are for
        self.key = key


class HeldWrites:
    """The writes held per checkpoint, which checkpoint of each thread is live, and the
    flusher that commits what waited too long (``commit(thread_id, batch)``)."""

    def __init__(
        self, commit: Callable[[str, list[Held]], None], hold: float | None = None
    ) -> None:
        # read when the saver is made (a test widens the window to make a race certain)
        self.window = HOLD if hold is None else hold
        self._commit = commit
        self._cond = threading.Condition()
        self._held: dict[Key, tuple[float, list[Held]]] = {}
        self._live: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._flusher: threading.Thread | None = None
        self._closed = False
        #: threads whose held writes the flusher is committing right now
        self._flushing: dict[str, int] = {}

    @property
    def pending(self) -> bool:
        return bool(self._held) or bool(self._flushing)

    def wait_flushed(self, thread_id: str | None) -> None:
        """Until the flusher's commits of a thread's writes (None: any) are over: a reader
        that found nothing held must not read before writes already taken are stored."""
        with self._cond:
            while self._flushing.get(thread_id, 0) if thread_id else self._flushing:
                self._cond.wait()

    def set_live(self, thread_id: str, ns: str, checkpoint_id: str | None) -> None:
        """The checkpoint a run of (thread, namespace) goes on from (None: none is)."""
        with self._cond:
            scope = (thread_id, ns)
            if checkpoint_id is None:
                self._live.pop(scope, None)
                return
            self._live[scope] = checkpoint_id
            self._live.move_to_end(scope)
            while len(self._live) > _LIVE:
                self._live.popitem(last=False)

    def hold(self, key: Key, held: Held) -> bool:
        """Hold ``held`` for the checkpoint after ``key`` if that checkpoint is live; False
        if it is not (the caller commits it now)."""
        with self._cond:
            if self.window <= 0 or self._closed or self._live.get(key[:2]) != key[2]:
                return False
            group = self._held.get(key)
            if group is None:
                self._held[key] = (time.monotonic() + self.window, [held])
                self._start()
                self._cond.notify_all()
            else:
                group[1].append(held)
            return True

    def take(
        self, thread_id: str | None, ns: str | None = None, checkpoint_id: str | None = None
    ) -> list[Held]:
        """Claim the writes held for a thread (None: every thread; of one namespace, one
        checkpoint) for the caller's transaction."""
        if not self._held:
            return []
        with self._cond:
            keys = [
                k
                for k in self._held
                if (thread_id is None or k[0] == thread_id)
                and (ns is None or k[1] == ns)
                and (checkpoint_id is None or k[2] == checkpoint_id)
            ]
            return [held for k in keys for held in self._held.pop(k)[1]]

    def restore(self, held: list[Held]) -> None:
        """Hold again writes whose transaction failed (ahead of any held since); the flusher
        tries them again after ``RETRY`` seconds, unless a write of their thread takes them
        first."""
        if not held:
            return
        with self._cond:
            due = time.monotonic() + RETRY
            for h in reversed(held):
                group = self._held.get(h.key)
                if group is None:
                    self._held[h.key] = (due, [h])
                else:
                    group[1].insert(0, h)
            self._start()
            self._cond.notify_all()

    def threads(self) -> list[str]:
        with self._cond:
            return sorted({k[0] for k in self._held})

    def close(self) -> None:
        """Stop the flusher (the caller commits what is still held first)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- the flusher -------------------------------------------------------------------------

    def _start(self) -> None:
        if self._flusher is None:
            self._flusher = threading.Thread(
                target=self._flush_loop, name="longtask-held-writes", daemon=True
            )
            self._flusher.start()

    def _flush_loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    now = time.monotonic()
                    due = [k for k, (at, _) in self._held.items() if at <= now]
                    if due:
                        break
                    nearest = min((at for at, _ in self._held.values()), default=None)
                    self._cond.wait(None if nearest is None else nearest - now)
                if self._closed:
                    return
                batches = [(k[0], self._held.pop(k)[1]) for k in due]
                for thread_id, _ in batches:
                    self._flushing[thread_id] = self._flushing.get(thread_id, 0) + 1
            for thread_id, batch in batches:
                try:
                    self._commit(thread_id, batch)
                except Exception:
                    # Held again by the commit for a lost connection (see ``restore``),
                    # dropped for a lost lease; the run's next write meets the same.
                    log.warning(
                        "thread %s: could not store %d held write(s) yet",
                        thread_id,
                        len(batch),
                        exc_info=True,
                    )
                finally:
                    with self._cond:
                        left = self._flushing[thread_id] - 1
                        if left:
                            self._flushing[thread_id] = left
                        else:
                            del self._flushing[thread_id]
                        self._cond.notify_all()
