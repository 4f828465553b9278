"""A Runner that only reads: status, results, events, what a thread waits for, its
checkpoints, the list of threads and what they cost, from the thread records, the latest
checkpoint and the event log. It imports no LangGraph, LangChain or task model, so
``longtask status`` and the other read commands start in a fraction of the time a process
that can run a graph takes (see ``bench/cli.py``)."""

from __future__ import annotations

from longtask.checkpointers import Database
from longtask.runtime._reading import Reads
from longtask.store import DEFAULT_INLINE_LIMIT, ValueCodec


class Reader(Reads):
    """The reads of :class:`~longtask.Runner` (``status``, ``pending``, ``history``,
    ``result``, ``results``, ``events``, ``threads``, ``threads_with_cost``, ``usage``,
    ``effects``) on ``db`` (a URL, an open Database, or None for the default). With
    ``create=False`` (the default) a missing SQLite file is an error."""

    def __init__(self, db: str | Database | None = None, *, create: bool = False) -> None:
        self._owns_db = not isinstance(db, Database)
        opened = db if isinstance(db, Database) else Database.open(db, create=create)
        super().__init__(opened, ValueCodec(opened.store, DEFAULT_INLINE_LIMIT, maps=opened.store))

    def close(self) -> None:
        if self._owns_db:
            self.db.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
