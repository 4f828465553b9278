"""The store a graph gets: LangGraph's store on the thread database (``_kvstore``), the one
the Server API's ``/store`` routes serve, opened on first use.

Every LongTask's graph is compiled with it, so a graph step's graph, a served graph and an
agent step's tools reach it as they reach LangGraph's server's store: ``runtime.store``,
``get_store()``, a node's ``store`` parameter, an ``InjectedStore`` tool argument. A task
that never touches it opens nothing (no connection, no tables, no sweeper thread).

A node's writes to the store are not part of its checkpoint: LangGraph's store commits each
write at once, as on LangGraph's server. A node cut off by a crash runs again from its
start and finds the writes it made before the crash (put is by key, so writing the same
item again leaves one item).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from langgraph.store.base import BaseStore, Op, Result

from longtask.checkpointers._kvstore import TTL, KvStore, open_kv_store

if TYPE_CHECKING:
    from longtask.checkpointers._url import DatabaseURL


class GraphStore(BaseStore):
    """LangGraph's ``BaseStore`` on the thread database, opened on its first operation."""

    supports_ttl = True

    def __init__(self, url: DatabaseURL) -> None:
        self._url = url
        self._lock = threading.Lock()
        self._opened: KvStore | None = None
        self.ttl_config: Any = dict(TTL)

    def opened(self) -> BaseStore:
        """The store itself (opened now if it was not)."""
        with self._lock:
            if self._opened is None:
                self._opened = open_kv_store(self._url, ttl=self.ttl_config)
            return self._opened.store

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self.opened().batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        # LangGraph's SQLite store has no async side, and its PostgreSQL one runs its sync
        # side in an executor: the same here, for both
        ops = list(ops)
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, ops)

    def close(self) -> None:
        with self._lock:
            if self._opened is not None:
                self._opened.close()
                self._opened = None
