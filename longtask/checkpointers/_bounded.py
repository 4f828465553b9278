"""``$LONGTASK_DB_TIMEOUT`` as a bound on every PostgreSQL call (issue 28, item 3).

A frozen network path (a stuck middlebox, a frozen server) is the case TCP cannot see: the
peer's kernel, or a proxy's, keeps acknowledging what is sent, so keepalives and
``tcp_user_timeout`` never fire and a read waits for ever. So the bound is kept by the
client itself: every wait of a connection for the server (a statement, a commit, a pipeline
sync, the lock connection's calls) gives up after the bound and closes the connection, and
a pool checkout waits no longer. TCP keepalives and ``tcp_user_timeout`` still catch a dead
peer on an idle connection, ``connect_timeout`` a connection that never opens, and the
server's own ``statement_timeout``, ``lock_timeout`` and
``idle_in_transaction_session_timeout`` end the server's side of work the client gave up on.

Once one call has given up, the database is taken to be unreachable for one bound: the calls
after it (a command's clean-up, the other threads of a run) share a short grace and then
fail at once, so a command stops about one bound after the fault, not one bound per call.
A call that succeeds ends the outage; after one bound calls get the whole bound again.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolTimeout

from longtask.errors import DatabaseError

#: seconds any one database call may wait for the server before the command fails
TIMEOUT_VAR = "LONGTASK_DB_TIMEOUT"
#: after a call gave up, how long the calls after it may still wait in all (s)
GRACE = 1.0
#: the least wait a call is given (a poll: an answer already there is still read)
_LEAST = 0.05


def db_timeout() -> float:
    """``$LONGTASK_DB_TIMEOUT`` in seconds (default 30)."""
    raw = os.environ.get(TIMEOUT_VAR, "30")
    try:
        value = float(raw)
    except ValueError:
        raise DatabaseError(f"${TIMEOUT_VAR} must be a number of seconds, not {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise DatabaseError(f"${TIMEOUT_VAR} must be more than 0 seconds, not {raw!r}")
    return value


class Outage:
    """How long the next call may wait: the bound, or what is left of the grace after a
    call gave up (shared by every connection of one database)."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self._lock = threading.Lock()
        self._since: float | None = None
        #: calls that gave up (for ``longtask_db_timeouts_total`` of /metrics)
        self.timeouts = 0

    def budget(self) -> float:
        since = self._since
        if since is None:
            return self.bound
        now = time.monotonic()
        if now - since >= self.bound:
            with self._lock:
                self._since = None  # try again with the whole bound
            return self.bound
        return max(since + min(GRACE, self.bound) - now, _LEAST)

    def failed(self) -> None:
        with self._lock:
            self.timeouts += 1
            if self._since is None:
                self._since = time.monotonic()

    def answered(self) -> None:
        if self._since is not None:
            with self._lock:
                self._since = None


def connect_kwargs(bound: float, conninfo: str) -> dict[str, Any]:
    """libpq options that bound connecting and notice a dead peer, for what the URL does not
    set itself."""
    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(conninfo)
    keepalive = max(1, int(bound // 3))
    wanted: dict[str, Any] = {
        # libpq counts whole seconds and takes less than 2 as 2
        "connect_timeout": max(2, math.ceil(bound)),
        "keepalives": 1,
        "keepalives_idle": keepalive,
        "keepalives_interval": keepalive,
        "keepalives_count": 3,
        "tcp_user_timeout": int(bound * 1000),
    }
    return {k: v for k, v in wanted.items() if k not in given}


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait for the server ends within the bound of its
    ``outage`` (set by ``bind``); one that gave up is closed (its state is unknown)."""

    outage: Outage | None = None

    def bind(self, outage: Outage) -> None:
        """Keep this connection's waits within ``outage``'s bound, and have the server end
        its side of work after it too."""
        self.outage = outage
        ms = int(outage.bound * 1000)
        with self.cursor() as cur:
            for setting in (
                "statement_timeout",
                "lock_timeout",
                "idle_in_transaction_session_timeout",
            ):
                cur.execute(f"SELECT set_config('{setting}', %s, false)", (f"{ms}ms",))
        if self.pgconn.transaction_status == TransactionStatus.INTRANS:
            self.commit()  # not autocommit: the settings must not ride in an open transaction

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        outage = self.outage
        if outage is None:
            return super().wait(gen, interval, timeout)
        budget = outage.budget()
        try:
            result = super().wait(gen, interval, budget if timeout is None else timeout)
        except psycopg.errors._WaitTimeout:
            outage.failed()
            self.pgconn.finish()  # half a statement sent or read: the connection is unusable
            raise psycopg.OperationalError(
                f"the database server did not answer within {outage.bound:g} s (${TIMEOUT_VAR})"
            ) from None
        outage.answered()
        return result


class BoundedPool(ConnectionPool[Any]):
    """A pool whose checkouts wait no longer than its ``outage`` allows."""

    def __init__(self, *args: Any, outage: Outage, **kwargs: Any) -> None:
        self.outage = outage
        super().__init__(*args, **kwargs)

    def getconn(self, timeout: float | None = None) -> Any:
        budget = self.outage.budget()
        try:
            return super().getconn(budget if timeout is None else min(timeout, budget))
        except PoolTimeout:
            self.outage.failed()
            what = (
                "the database server did not answer"
                if budget < self.outage.bound
                else "no connection to the database server could be had"
            )
            raise psycopg.OperationalError(
                f"{what} within {self.outage.bound:g} s (${TIMEOUT_VAR})"
            ) from None
