"""Group commit: a task's writes wait a moment for the checkpoint that follows them.

In a run, LangGraph stores each task's writes (``put_writes``, from a worker thread as the
task returns) and then, once the super-step is over, the checkpoint that applies them
(``put``). Committed apart, that is two transactions — two WAL flushes on PostgreSQL — per
step of a chain. So the writes of a task on a *live* checkpoint (one this process stored for
a run that goes on: metadata source ``input`` or ``loop``) are held for up to ``HOLD``
seconds: the ``put`` of the checkpoint's child takes them into its own transaction. If none
comes in time (a step still runs beside this one), they are committed on their own, as
before. A second task's writes on the same checkpoint commit at once and carry the held ones
with them, so at most one worker thread per checkpoint waits. Special writes (an error, an
interrupt, a resume) never wait: they end a super-step without a checkpoint after them.

Nothing becomes durable later than a caller can tell: ``put_writes`` returns only once its
rows are committed (by itself, by a sibling or by the ``put``), and raises if that
transaction failed — a lost lease included. A crash while writes are held loses them with
the step that made them, exactly as a crash a moment earlier, inside the step, would: the
step runs again on resume (its effects are kept by the ledger). Every read of a thread's
checkpoints first commits what is held for it, so readers see each write ``put_writes`` was
given.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

#: how long a task's writes wait for the checkpoint after them (seconds): LangGraph stores
#: that checkpoint right after the super-step's last task returns (well under a millisecond
#: of work for a small graph, a few for a task of thousands of steps)
HOLD = 0.02
#: live checkpoints remembered, one per (thread, namespace)
_LIVE = 4096

Key = tuple[str, str, str]  # thread, namespace, checkpoint id


class Held:
    """One ``put_writes`` call's rows (and the statement that stores them), until committed."""

    __slots__ = ("done", "error", "rows", "sql", "taken")

    def __init__(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.sql = sql
        self.rows = rows
        self.done = threading.Event()
        self.error: BaseException | None = None
        #: claimed by a transaction (the holder's own, a sibling's, a put's or a read's)
        self.taken = False

    def store(self, tx: Any) -> None:
        tx.executemany(self.sql, self.rows)

    def finish(self, error: BaseException | None) -> None:
        self.error = error
        self.done.set()

    def result(self) -> None:
        if self.error is not None:
            raise self.error


class HeldWrites:
    """The writes held per checkpoint, and which checkpoint of each thread is live."""

    def __init__(self, hold: float = HOLD) -> None:
        self.window = hold
        self._lock = threading.Lock()
        self._held: dict[Key, Held] = {}
        self._live: OrderedDict[tuple[str, str], str] = OrderedDict()

    @property
    def pending(self) -> bool:
        return bool(self._held)

    def set_live(self, thread_id: str, ns: str, checkpoint_id: str | None) -> None:
        """The checkpoint a run of (thread, namespace) goes on from (None: none is)."""
        with self._lock:
            scope = (thread_id, ns)
            if checkpoint_id is None:
                self._live.pop(scope, None)
                return
            self._live[scope] = checkpoint_id
            self._live.move_to_end(scope)
            while len(self._live) > _LIVE:
                self._live.popitem(last=False)

    def hold(self, key: Key, mine: Held) -> Held | None:
        """Offer ``mine`` to wait for the checkpoint after ``key``. Returns None if it now
        waits (call ``wait``); else the writes held before it, taken, to commit together
        with it at once; ``mine`` itself if it cannot wait (not on a live checkpoint)."""
        with self._lock:
            if self.window <= 0 or self._live.get(key[:2]) != key[2]:
                return mine
            other = self._held.pop(key, None)
            if other is not None:
                other.taken = True
                return other
            self._held[key] = mine
            return None

    def wait(self, key: Key, mine: Held) -> bool:
        """Wait for a transaction to take ``mine``. True once one has committed it (or
        failed: see ``Held.result``); False if none came in time and the caller commits it."""
        if mine.done.wait(self.window):
            return True
        with self._lock:
            if not mine.taken:
                mine.taken = True
                if self._held.get(key) is mine:
                    del self._held[key]
                return False
        mine.done.wait()  # taken just now: its transaction is under way
        return True

    def take(
        self, thread_id: str, ns: str | None = None, checkpoint_id: str | None = None
    ) -> list[Held]:
        """Claim the writes held for a thread (of one namespace, one checkpoint), for the
        caller's transaction, which must ``finish`` each."""
        if not self._held:
            return []
        with self._lock:
            keys = [
                k
                for k in self._held
                if k[0] == thread_id
                and (ns is None or k[1] == ns)
                and (checkpoint_id is None or k[2] == checkpoint_id)
            ]
            out = [self._held.pop(k) for k in keys]
        for held in out:
            held.taken = True
        return out

    def threads(self) -> list[str]:
        with self._lock:
            return sorted({k[0] for k in self._held})
