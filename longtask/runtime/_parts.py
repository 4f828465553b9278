"""Storing a served run's stream parts as the run yields them (``longtask_run_parts``), so a
client of ``serve`` follows the run and resumes its stream whichever process advances it.

``logging_parts`` taps the runs made inside it (``tapping``): each part LangGraph yields is
serialised with the checkpointer's serde and kept in order; the kept parts are stored in one
write at most ``BATCH`` seconds after the first of them (a timer stores what a long step
leaves waiting), at ``BATCH_ROWS`` parts, and whenever the run's stream ends (the Engine
calls ``flush`` before it records the thread's status), so everything a run yielded before
its thread's status changes is stored before that status. A model's tokens (``messages``
mode, asked only when a client streams messages) are parts like any other: a write per
batch, not per token, and none of them in the thread's history.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from longtask.runtime._calls import tapping

if TYPE_CHECKING:
    from longtask.store import Store

log = logging.getLogger("longtask.runtime")

#: seconds a part waits at most before it is stored
BATCH = 0.05
#: parts stored in one write at most
BATCH_ROWS = 256
#: the stream modes whose clients want tokens
TOKEN_MODES = frozenset({"messages", "messages-tuple"})
#: what a token's metadata keeps (LangGraph's own keys and the model's; never the run's
#: config, which may hold anything)
_META_PREFIXES = ("langgraph_", "ls_")

_Row = tuple[str, str, str | None, bytes | None]


def _meta(meta: Any) -> dict[str, Any]:
    if not isinstance(meta, Mapping):
        return {}
    out = {k: v for k, v in meta.items() if isinstance(k, str) and k.startswith(_META_PREFIXES)}
    if isinstance(meta.get("tags"), list):
        out["tags"] = [t for t in meta["tags"] if isinstance(t, str)]
    return out


class PartLog:
    """A tap listener storing one thread's parts."""

    def __init__(self, store: Store, serde: Any, thread_id: str) -> None:
        self.store = store
        self.serde = serde
        self.thread_id = thread_id
        self._rows: list[_Row] = []
        self._failed = False
        # Writes come from the run's thread and from the timer: one at a time, in order.
        self._lock = threading.Lock()

    def __call__(self, ns: tuple[str, ...], mode: str, chunk: Any) -> None:
        try:
            if mode == "messages":
                from langchain_core.messages import BaseMessageChunk

                message = chunk[0] if isinstance(chunk, tuple) and chunk else None
                if not isinstance(message, BaseMessageChunk):
                    return  # a whole message: its node's update says it
                chunk = (message, _meta(chunk[1]))
            kind, body = self.serde.dumps_typed(chunk)
            with self._lock:
                first = not self._rows
                self._rows.append(("|".join(ns), mode, kind, body))
                full = len(self._rows) >= BATCH_ROWS
            if full:
                self.flush()
            elif first:
                timer = threading.Timer(BATCH, self.flush)
                timer.daemon = True
                timer.start()
        except Exception:
            # A stream part that cannot be kept never stops the run; say so once.
            self._warn("a stream part was not stored")

    def flush(self) -> None:
        """Store the parts kept so far (never raises: a stream is not worth a run)."""
        with self._lock:
            rows, self._rows = self._rows, []
            if not rows:
                return
            try:
                self.store.parts_put(self.thread_id, rows)
            except Exception:
                self._warn("stream parts were not stored")

    def _warn(self, what: str) -> None:
        if not self._failed:
            self._failed = True
            log.warning("thread %s: %s", self.thread_id, what, exc_info=True)


def token_modes(modes: Sequence[str]) -> tuple[str, ...]:
    """The extra modes a run is tapped with when its clients stream ``modes``."""
    return ("messages",) if TOKEN_MODES & set(modes) else ()


@contextlib.contextmanager
def logging_parts(
    store: Store, serde: Any, thread_id: str, modes: Sequence[str] = ()
) -> Iterator[PartLog]:
    """Store the parts of the runs made on this thread inside the block (``modes``: the
    modes the run's clients stream, for whether tokens are wanted)."""
    part_log = PartLog(store, serde, thread_id)
    try:
        with tapping(part_log, token_modes(modes)):
            yield part_log
    finally:
        part_log.flush()


def parts_of(serde: Any, kind: str | None, body: bytes | None) -> Any:
    """A stored part's chunk."""
    return serde.loads_typed((kind or "null", body or b""))
