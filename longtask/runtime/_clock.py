"""The clock a Runner decides time by: deadlines of approvals and waits, budget deadlines,
retries, expiries and schedule fires.

On PostgreSQL every process sharing the database reads the time of the database server,
so a process whose clock is fast or slow (an NTP step, a machine set wrong) neither times
out a pause nor fires a schedule early or late: one clock decides for all of them. The
server's time is read once and carried forward on this process's monotonic clock (which
an NTP step does not move), and read again every ``REFRESH`` seconds for drift, so a step
costs no round trip and a read of the time never fails because the database is away. On
SQLite every process is on one machine and reads that machine's clock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

log = logging.getLogger(__name__)

#: seconds between reads of the server's time
REFRESH = 300.0


class ServerClock:
    """``now()`` of the database server: read from ``server_time`` (seconds since the
    epoch) and carried forward on ``time.monotonic``."""

    def __init__(self, server_time: Callable[[], float]) -> None:
        self._server_time = server_time
        self._lock = threading.Lock()
        # read at once: the first deadline must not wait on (or fail with) the database
        self._base, self._at = server_time(), time.monotonic()

    def __call__(self) -> datetime:
        now = time.monotonic()
        if now - self._at > REFRESH:
            self._refresh()
            now = time.monotonic()
        with self._lock:
            return datetime.fromtimestamp(self._base + (now - self._at), UTC)

    def _refresh(self) -> None:
        try:
            base, at = self._server_time(), time.monotonic()
        except Exception as exc:  # carried forward: it is still the server's time
            log.debug("could not read the database server's time (%s); carried forward", exc)
            return
        with self._lock:
            self._base, self._at = base, at
