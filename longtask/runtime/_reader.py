"""A Runner that only reads: status, results, events, the list of threads and what they
cost, from the thread records, the latest checkpoint and the event log. It imports no
LangGraph, LangChain or task model, so ``longtask status`` and the other read commands
start in a fraction of the time a process that can run a graph takes (see
``bench/cli.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from longtask.checkpointers import Database
from longtask.runtime._costs import CostMixin
from longtask.runtime._reading import ReadingMixin
from longtask.store import DEFAULT_INLINE_LIMIT, ValueCodec

if TYPE_CHECKING:
    from longtask.store import Effect


class Reader(ReadingMixin, CostMixin):
    """The reading methods of :class:`~longtask.runtime.Runner` (``status``, ``result``,
    ``results``, ``events``, ``threads``, ``threads_with_cost``, ``usage``, ``effects``)
    on ``db`` (a URL, an open Database, or None for the default). With ``create=False``
    (the default) a missing SQLite file is an error."""

    def __init__(self, db: str | Database | None = None, *, create: bool = False) -> None:
        self._owns_db = not isinstance(db, Database)
        self.db = db if isinstance(db, Database) else Database.open(db, create=create)
        self.codec = ValueCodec(self.db.store, DEFAULT_INLINE_LIMIT, maps=self.db.store)
        self.events_writer = self.db.events
        self.worker = None

    def effects(self, thread_id: str) -> list[Effect]:
        """The side-effect ledger of a thread, oldest first."""
        self._thread(thread_id)
        return self.db.store.effects(thread_id)

    def close(self) -> None:
        if self._owns_db:
            self.db.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # A reader never loads a task or advances a thread: what a Runner does with these, it
    # refuses (no read method calls them).
    def _refuse(self) -> NoReturn:
        raise TypeError("a Reader only reads threads; use a Runner to run or change them")

    def _load(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()

    def graph(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()

    def _compiled(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()

    def _validate_inputs(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()

    def _new_thread(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()

    def resume(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()

    def _advance(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()

    def served_by_workers(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()

    def enqueue(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()
