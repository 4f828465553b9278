"""Fencing: the lease epochs a process holds, checked with its writes.

Every advance of a thread (by a single process or a worker) takes a new lease epoch.
longtask's saver checks it in each checkpoint transaction (``longtask_fence_check`` on
PostgreSQL). The ledger's writes carry it as ``longtask.fence`` (a session setting:
``thread=epoch,...``), which a trigger on ``longtask_effects`` compares with
``longtask_leases`` in the write's own transaction. A stale writer's write is rejected.
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

    def epoch(self, thread_id: str) -> int | None:
        """The lease epoch this process holds on ``thread_id``, if any."""
        return self._held.get(thread_id)

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
