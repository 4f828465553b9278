"""Fencing: the lease epochs a worker process holds, sent with its writes.

Each connection this process writes through carries ``longtask.fence`` (a session setting:
``thread=epoch,...``) for the threads it holds; a trigger on the checkpoint and ledger tables
compares it with ``longtask_leases`` in the write's own transaction and rejects a stale one.
A process that holds nothing sends nothing, and pays nothing.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

LOST = "longtask lease lost"


class Fence:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        self.value = ""
        #: the setting each connection carries now (so it is sent only when it changes)
        self._sent: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def hold(self, thread_id: str, epoch: int) -> None:
        with self._lock:
            self._held[thread_id] = epoch
            self.value = ",".join(f"{t}={e}" for t, e in sorted(self._held.items()))

    def drop(self, thread_id: str) -> None:
        with self._lock:
            self._held.pop(thread_id, None)
            self.value = ",".join(f"{t}={e}" for t, e in sorted(self._held.items()))

    def apply(self, conn: Any, cursor: Any) -> None:
        """Bring ``conn``'s setting up to date, through ``cursor`` (same pipeline)."""
        value = self.value
        if self._sent.get(conn, "") == value:
            return
        cursor.execute("SELECT set_config('longtask.fence', %s, false)", (value,))
        self._sent[conn] = value


def lease_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or its cause) is the fence trigger refusing a stale write."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 10:
        if LOST in str(current):
            return True
        current = current.__cause__ or current.__context__
        seen += 1
    return False
