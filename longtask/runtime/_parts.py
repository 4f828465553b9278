"""Storing a served run's stream parts as the run yields them (``longtask_run_parts``), so a
client of ``serve`` follows the run and resumes its stream whichever process advances it.

``logging_parts`` taps the runs made inside it (``tapping``): each part LangGraph yields is
serialised with the checkpointer's serde and stored, in order, before the run goes on, so
everything a run did before its thread's status changes is stored before that status. A
model's tokens (``messages`` mode, asked only when a client streams messages) are stored
in batches, at most ``TOKEN_BATCH`` seconds apart: one write per batch, not per token, and
none of them in the thread's history.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from longtask.runtime._calls import tapping

if TYPE_CHECKING:
    from longtask.store import Store

log = logging.getLogger("longtask.runtime")

#: seconds a model's tokens wait at most before they are stored
TOKEN_BATCH = 0.05
#: the stream modes whose clients want tokens
TOKEN_MODES = frozenset({"messages", "messages-tuple"})
#: what a token's metadata keeps (LangGraph's own keys and the model's; never the run's
#: config, which may hold anything)
_META_PREFIXES = ("langgraph_", "ls_")


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
        self._tokens: list[tuple[str, str, str | None, bytes | None]] = []
        self._last = time.monotonic()
        self._failed = False

    def __call__(self, ns: tuple[str, ...], mode: str, chunk: Any) -> None:
        try:
            if mode == "messages":
                from langchain_core.messages import BaseMessageChunk

                message = chunk[0] if isinstance(chunk, tuple) and chunk else None
                if not isinstance(message, BaseMessageChunk):
                    return  # a whole message: its node's update says it
                part = self._row(ns, mode, (message, _meta(chunk[1])))
                self._tokens.append(part)
                if time.monotonic() - self._last >= TOKEN_BATCH:
                    self.flush()
                return
            rows = [*self._tokens, self._row(ns, mode, chunk)]
            self._tokens = []
            self._put(rows)
        except Exception:
            # A stream part that cannot be stored never stops the run; say so once.
            if not self._failed:
                self._failed = True
                log.warning(
                    "thread %s: a stream part was not stored", self.thread_id, exc_info=True
                )

    def _row(self, ns: tuple[str, ...], mode: str, chunk: Any) -> tuple[str, str, str, bytes]:
        kind, body = self.serde.dumps_typed(chunk)
        return ("|".join(ns), mode, kind, body)

    def _put(self, rows: list[tuple[str, str, str | None, bytes | None]]) -> None:
        self._last = time.monotonic()
        self.store.parts_put(self.thread_id, rows)

    def flush(self) -> None:
        rows, self._tokens = self._tokens, []
        if rows:
            try:
                self._put(rows)
            except Exception:
                log.warning(
                    "thread %s: stream parts were not stored", self.thread_id, exc_info=True
                )


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
