"""longtask's checkpoint saver: one transaction per checkpoint, fenced, linear storage.

A ``put`` commits, in one transaction: the lease check of the writer (``fence``), the
values of the channels that changed, the checkpoint row (its version maps as a delta against
its parent, see ``_maps``), and every event the thread emitted since its last write (the
``outbox``). A ``put_writes`` commits a task's writes with the same check and events. So a
checkpoint is never stored without its events, and a writer that lost its lease stores
nothing at all. Events about work in progress that waited too long for such a write are
stored on their own (``store_live``), with the same check.

Tables (``longtask_cp_*``, created by the store's migrations):

- ``longtask_cp_checkpoints``: one row per checkpoint: parent, ``base_id`` (the snapshot
  its delta chain starts from), ``depth`` (0 for a snapshot), ``state`` (the encoded maps),
  metadata as JSON, the run id (for ``delete_for_runs``) and ``seq``, its place in the
  thread's order: the latest checkpoint is the one stored last, whatever the clocks of the
  processes that wrote them said (ids are LangGraph's time-ordered uuid6; see
  ``store._order``).
- ``longtask_cp_values``: one row per (channel, version): a value is stored once, when its
  version is new.
- ``longtask_cp_writes``: pending writes by checkpoint and task.

The SQL dialects live in ``_saver_sql``; the async methods run the sync ones in a worker
thread (the pool and the SQLite connection are shared safely between threads).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import logging
import random
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.types import ERROR, RESUME

from longtask.checkpointers._held import Held, HeldWrites
from longtask.checkpointers._maps import (
    FULL_EVERY,
    copy_maps,
    encode_delta,
    encode_full,
    triggered,
)
from longtask.checkpointers._reader import _ABSENT, CheckpointReader, version_key
from longtask.checkpointers._saver_sql import EVENTS_SQL, Batch
from longtask.store._store import NO_CHECKPOINT

if TYPE_CHECKING:
    from longtask.checkpointers._saver_sql import Backend
    from longtask.store import EventWriter, NewEvent
    from longtask.store._fence import Fence

log = logging.getLogger("longtask.checkpointers")

_BASE_KEYS = frozenset(
    {"v", "id", "ts", "channel_values", "channel_versions", "versions_seen", "updated_channels"}
)


class FailedTask(NamedTuple):
    """A task whose writes hold an answer to an interrupt and an error
    (``LongTaskSaver.failed_answered_tasks``)."""

    #: the config of the checkpoint the task ran on (thread, namespace, checkpoint id)
    config: RunnableConfig
    task_id: str
    #: LangGraph's path of the task, stored with its writes
    task_path: str
    #: (channel, value) of each of its writes, in their order
    writes: builtins.list[tuple[str, Any]]


class LongTaskSaver(CheckpointReader, BaseCheckpointSaver[str]):
    """A ``BaseCheckpointSaver`` for SQLite and PostgreSQL (see the module docstring); the
    reading is :class:`CheckpointReader`'s, with LangGraph's tuples and serializer."""

    _tuple_type = CheckpointTuple

    def __init__(
        self,
        backend: Backend,
        *,
        fence: Fence | None = None,
        outbox: EventWriter | None = None,
    ) -> None:
        BaseCheckpointSaver.__init__(self)
        self._init_reader(backend)
        self.fence = fence
        self.outbox = outbox
        self._stripes = [threading.Lock() for _ in range(64)]
        self._held = HeldWrites(self._commit_held)
        #: statements to run in the transaction of a thread's next checkpoint (``with_put``)
        self._with_put: dict[str, Sequence[tuple[str, Sequence[Any]]]] = {}
        #: checks run in the transaction of each write of a thread (``guarded``)
        self._guards: dict[str, Callable[[Any], None]] = {}
        #: a guarded write's task writes, kept for the checkpoint it stores after them
        self._guarded_writes: dict[str, builtins.list[Held]] = {}

    # -- versions ----------------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        # LangGraph's own format (so threads migrated from its savers keep comparing): a
        # counter, and a random part so that two branches of a fork never store different
        # values under one (channel, version).
        if current is None:
            number = 0
        elif isinstance(current, int | float):
            number = int(current)
        else:
            number = int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- the write path ----------------------------------------------------------------------

    def with_put(self, thread_id: str, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Run ``statements`` in the transaction of the thread's next ``put`` (a record that
        must change with a checkpoint, as a migration's new definition hash)."""
        self._with_put[thread_id] = statements

    @contextlib.contextmanager
    def guarded(self, thread_id: str, check: Callable[[Any], None]) -> Iterator[None]:
        """Run ``check(tx)`` in the transaction of every write of ``thread_id`` stored in
        this block (``tx.query(sql, params)`` reads): a check that raises stores nothing of
        that write. For a writer that holds the thread's lock, whose write must be ordered
        with rows other processes record without it (an accepted answer's run or inbox
        command). The block's task writes (LangGraph's ``update_state`` stores its writes
        on the checkpoint it starts from, then the checkpoint that applies them) wait for
        that checkpoint's transaction, whatever checkpoint is live: stored apart, they and
        the events waiting in the outbox (the write's ``manual.update``) would commit
        before the check refused the checkpoint. Writes left when the block ends (its
        checkpoint never came) are not stored."""
        self._guards[thread_id] = check
        try:
            yield
        finally:
            self._guards.pop(thread_id, None)
            self._guarded_writes.pop(thread_id, None)

    def _events_for(self, thread_id: str) -> builtins.list[NewEvent]:
        return self.outbox.take(thread_id, writing=True) if self.outbox is not None else []

    def _epoch(self, thread_id: str) -> int | None:
        return self.fence.epoch(thread_id) if self.fence is not None else None

    def _ordered(self, thread_id: str) -> threading.Lock:
        """The lock that orders one thread's writes: its events are taken from the outbox
        and inserted under it, so their ids follow the order they were emitted in even when
        parallel steps write at once."""
        return self._stripes[hash(thread_id) % len(self._stripes)]

    def _guarded_for(self, thread_id: str, ns: str, parent_id: str | None) -> builtins.list[Held]:
        """The guarded block's task writes on ``parent_id``, for its child's transaction."""
        kept = self._guarded_writes.get(thread_id)
        if not kept or parent_id is None:
            return []
        key = (thread_id, ns, parent_id)
        mine = [h for h in kept if h.key == key]
        kept[:] = [h for h in kept if h.key != key]
        return mine

    def _commit(self, thread_id: str, batch: Batch) -> None:
        """Store ``batch`` in one fenced transaction together with the thread's pending
        events and blobs; on failure they go back to the outbox (they are not lost). In a
        ``guarded`` block of the thread, the block's check runs first in the transaction."""
        guard = self._guards.get(thread_id)
        if guard is not None:
            batch.then = _checked_first(guard, batch.then)
        with self._ordered(thread_id):
            events = self._events_for(thread_id)
            blobs = self.outbox.take_blobs(thread_id) if self.outbox is not None else {}
            batch.events = [*events, *batch.events]
            batch.blobs = {**blobs, **batch.blobs}
            try:
                self.backend.write(thread_id, self._epoch(thread_id), batch)
            except BaseException:
                if self.outbox is not None:
                    if events:
                        self.outbox.restore(thread_id, events)
                    if blobs:
                        self.outbox.restore_blobs(thread_id, blobs)
                raise
            if events and self.outbox is not None:
                self.outbox.landed(thread_id, events)

    def store_live(self, thread_id: str) -> None:
        """Store the thread's pending live events (see EventWriter) in a transaction of
        their own, fenced: a writer that lost its lease stores none, and drops them (they
        tell of its own dead work, which another process now redoes)."""
        from longtask.store._fence import lease_lost

        assert self.outbox is not None
        with self._ordered(thread_id):
            events = self.outbox.take_live(thread_id)
            if not events:
                return
            try:
                self.backend.write(thread_id, self._epoch(thread_id), Batch(events=events))
            except BaseException as exc:
                if lease_lost(exc):
                    self.outbox.landed(thread_id, events)
                else:
                    self.outbox.restore(thread_id, events)
                raise
            self.outbox.landed(thread_id, events)

    def settle(
        self, thread_id: str, sql: str, params: Sequence[Any], then: NewEvent | None = None
    ) -> bool:
        """Run one ``UPDATE ... RETURNING`` of the thread's record in a fenced transaction
        with the thread's pending events, and insert ``then`` only if it changed a row: the
        end of a run and the event that tells of it commit together."""
        from longtask.store._store import EVENTS_CHANNEL

        changed = False

        def work(tx: Any) -> None:
            nonlocal changed
            changed = bool(tx.execute(sql, params))
            if changed and then is not None:
                tx.executemany(EVENTS_SQL, [then.params()])
                if self.backend.NOTIFY:
                    tx.execute(self.backend.NOTIFY, (EVENTS_CHANNEL, thread_id))

        self._commit(thread_id, Batch(then=work))
        return changed

    def flush_events(
        self, thread_id: str, statements: Sequence[tuple[str, Sequence[Any]]] = ()
    ) -> None:
        """Store the thread's pending events that no checkpoint carried (the end of a run, a
        pause, a retry's record), with ``statements``, fenced like a checkpoint: a writer
        that lost its lease stores no event either. Writes still held for the thread go
        with them (the end of a run leaves none waiting)."""

        def run(tx: Any) -> None:
            for sql, params in statements:
                tx.execute(sql, params)

        self._commit_held(
            thread_id, self._held.take(thread_id), Batch(then=run if statements else None)
        )

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns", ""))
        parent_id = conf.get("checkpoint_id")
        if parent_id == NO_CHECKPOINT:  # a graph started on no checkpoint: a first one
            parent_id = None
        checkpoint_id = checkpoint["id"]
        cv = checkpoint["channel_versions"]
        vs = checkpoint["versions_seen"]
        extra: dict[str, Any] = {"t": checkpoint["ts"], "v": checkpoint["v"]}
        if checkpoint.get("updated_channels") is not None:
            extra["u"] = checkpoint["updated_channels"]
        others = {k: v for k, v in checkpoint.items() if k not in _BASE_KEYS}
        if any(others.values()):
            extra["x"] = list(self.serde.dumps_typed(others))

        key = (thread_id, ns)
        with self._heads_lock:
            head = self._heads.get(key)
        if (
            head is not None
            and parent_id is not None
            and head.checkpoint_id == parent_id
            and head.depth + 1 < FULL_EVERY
        ):
            state, *maps = encode_delta(
                head.cv, head.vs, cv, vs, extra, new_versions, triggered(head.updated)
            )
            base_id, depth = head.base_id, head.depth + 1
        else:
            state = encode_full(cv, vs, extra)
            maps = list(copy_maps(cv, vs))
            base_id, depth = checkpoint_id, 0

        values = checkpoint["channel_values"]
        value_rows = [
            (thread_id, ns, channel, version_key(version), *self.serde.dumps_typed(values[channel]))
            for channel, version in new_versions.items()
            if channel in values
        ]
        meta = get_serializable_checkpoint_metadata(config, metadata)
        run_id = meta.get("run_id")
        row = (
            thread_id,
            ns,
            checkpoint_id,
            parent_id,
            base_id,
            depth,
            state,
            json.dumps(meta, separators=(",", ":")),
            str(run_id) if run_id is not None else None,
        )

        # The writes of the super-step this checkpoint applies, if they still wait, commit
        # in its transaction (see _held).
        held = self._held.take(thread_id, ns, parent_id) if parent_id is not None else []
        statements = self._with_put.pop(thread_id, ())

        def then(tx: Any) -> None:
            for sql, params in statements:
                tx.execute(sql, params)

        batch = Batch(values=value_rows, checkpoint=row, then=then if statements else None)
        # A guarded write's own task writes: in the batch, not held (a refused write's are
        # dropped with it, never given back to be stored later).
        for h in self._guarded_for(thread_id, ns, parent_id):
            (batch.upserts if h.upsert else batch.writes).extend(h.rows)
        # Live before its commit: LangGraph runs the super-step's task while this put is
        # still committing (its writes can arrive first), and those writes wait for the
        # checkpoint after this one either way.
        live = meta.get("source") in ("input", "loop") and _one_task(checkpoint)
        self._held.set_live(thread_id, ns, checkpoint_id if live else None)
        try:
            self._commit_held(thread_id, held, batch)
        except BaseException:
            # The checkpoint is not stored: what its task wrote is lost with it, as in a
            # crash (the task runs again from the checkpoint before it).
            self._held.set_live(thread_id, ns, None)
            self._held.take(thread_id, ns, checkpoint_id)
            raise
        updated = checkpoint.get("updated_channels")
        self._remember(
            key, checkpoint_id, maps, base_id, depth, new_versions if updated is None else updated
        )
        self._cache_values(((thread_id, ns, r[2], r[3]), (r[4], r[5])) for r in value_rows)
        self._cache_values(
            ((thread_id, ns, channel, version_key(version)), _ABSENT)
            for channel, version in new_versions.items()
            if channel not in values
        )
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns", ""))
        checkpoint_id = conf["checkpoint_id"]
        rows = [
            (
                thread_id,
                ns,
                checkpoint_id,
                task_id,
                WRITES_IDX_MAP.get(channel, idx),
                channel,
                *self.serde.dumps_typed(value),
                task_path,
            )
            for idx, (channel, value) in enumerate(writes)
        ]
        # Special writes (errors, interrupts, resumes) replace an earlier one of the same
        # task; ordinary writes are kept as first stored (a retried task writes the same).
        upsert = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        mine = Held(upsert, rows, (thread_id, ns, str(checkpoint_id)))
        if not upsert and thread_id in self._guards:
            # committed with the checkpoint after them, under the check (see guarded)
            self._guarded_writes.setdefault(thread_id, []).append(mine)
            return
        if (
            not upsert
            # a task a running one started (a functional API's): it has a sibling
            and not task_path.startswith(_PUSH)
            and self._held.hold((thread_id, ns, str(checkpoint_id)), mine)
        ):
            return  # committed by the checkpoint after it, or by the flusher (see _held)
        # An error, an interrupt or a resume ends the super-step with no checkpoint after
        # it: commit now, with the writes held on this checkpoint.
        held = self._held.take(thread_id, ns, str(checkpoint_id)) if upsert else []
        self._commit_held(thread_id, [*held, mine])

    def _commit_held(
        self, thread_id: str, held: builtins.list[Held], batch: Batch | None = None
    ) -> None:
        """Commit held writes (with ``batch``) in one transaction. If it fails for anything
        but a lost lease they are held again, as its events go back to the outbox: a later
        transaction that stores those events (a flush before an effect, the end of the run)
        stores the results they tell of with them."""
        from longtask.store._fence import lease_lost

        batch = batch or Batch()
        for h in held:
            (batch.upserts if h.upsert else batch.writes).extend(h.rows)
        try:
            self._commit(thread_id, batch)
        except BaseException as exc:
            if held and not lease_lost(exc):
                self._held.restore(held)
            raise

    def _release(self, thread_id: str | None) -> None:
        """Commit what is held for a thread (None: every thread) before it is read."""
        if not self._held.pending:
            return
        for tid in [thread_id] if thread_id is not None else self._held.threads():
            batch = self._held.take(tid)
            if batch:
                self._commit_held(tid, batch)
        self._held.wait_flushed(thread_id)

    def release(self, thread_id: str | None = None) -> None:
        """Commit the writes held for a thread (None: all), as at the end of a run."""
        self._release(thread_id)

    def close(self) -> None:
        """Commit what is held and stop the flusher (the database is closing)."""
        try:
            self._release(None)
        except Exception:
            # The database is unreachable (the command is failing for it already): what is
            # held is lost with this process, as in a crash, and its steps run again.
            log.warning("could not store the held writes while closing", exc_info=True)
        finally:
            self._held.close()

    # -- reading -----------------------------------------------------------------------------

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        conf = config["configurable"] if config else {}
        thread_id = conf.get("thread_id")
        ns = conf.get("checkpoint_ns")
        self._release(None if thread_id is None else str(thread_id))
        rows = self.backend.checkpoint_rows(
            None if thread_id is None else str(thread_id),
            None if ns is None else str(ns),
            conf.get("checkpoint_id"),
            get_checkpoint_id(before) if before else None,
            # a metadata filter is applied here, so it reads every row of the range
            None if filter else limit,
        )
        if filter:
            rows = [r for r in rows if _matches(json.loads(r[7]), filter)][:limit]
        for start in range(0, len(rows), 100):
            yield from self._tuples(rows[start : start + 100])

    def failed_answered_tasks(self, thread_id: str, ns: str) -> builtins.list[FailedTask]:
        """The tasks in namespace ``ns`` or one below it whose writes hold both an answer to
        an interrupt (``RESUME``) and an error: a graph that raised after its interrupt()
        returned an answer. Each with its checkpoint's config and every write it has."""
        self._release(thread_id)
        rows = self.backend.read(
            "SELECT checkpoint_ns, checkpoint_id, task_id, channel, type, value, task_path "
            "FROM longtask_cp_writes w WHERE thread_id = ? "
            "AND (checkpoint_ns = ? OR substr(checkpoint_ns, 1, ?) = ?) "
            + " ".join(
                "AND EXISTS (SELECT 1 FROM longtask_cp_writes o WHERE o.thread_id = w.thread_id "
                "AND o.checkpoint_ns = w.checkpoint_ns AND o.checkpoint_id = w.checkpoint_id "
                "AND o.task_id = w.task_id AND o.channel = ?)"
                for _ in range(2)
            )
            + " ORDER BY checkpoint_ns, checkpoint_id, task_id, idx",
            (thread_id, ns, len(ns) + 1, ns + "|", RESUME, ERROR),
        )
        out: dict[tuple[str, str, str], FailedTask] = {}
        for cns, cid, task_id, channel, type_, blob, path in rows:
            key = (str(cns), str(cid), str(task_id))
            task = out.get(key)
            if task is None:
                config: RunnableConfig = {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": key[0],
                        "checkpoint_id": key[1],
                    }
                }
                task = out[key] = FailedTask(config, key[2], str(path or ""), [])
            value = self.serde.loads_typed((type_, bytes(blob) if blob is not None else b""))
            task.writes.append((str(channel), value))
        return builtins.list(out.values())

    # -- maintenance -------------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        self._release(thread_id)
        self.backend.delete_thread(thread_id)
        self._forget(lambda key: key[0] == thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if run_ids:
            self._release(None)
            self._remove(self.backend.rows_of_runs(list(run_ids)))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._release(source_thread_id)
        self.backend.copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy == "delete":
            for thread_id in thread_ids:
                self.delete_thread(thread_id)
            return
        if strategy != "keep_latest":
            raise ValueError(f"unknown prune strategy {strategy!r}: use keep_latest or delete")
        for thread_id in thread_ids:
            self._release(thread_id)
            doomed = self.backend.rows_but_latest(thread_id)
            self._remove(doomed, collect_values=True)

    def _remove(
        self, doomed: builtins.list[tuple[str, str, str]], collect_values: bool = False
    ) -> None:
        """Delete these checkpoints (thread, ns, id) and their writes. Survivors whose
        maps were stored as deltas through one of them are rewritten as snapshots first."""
        scopes = sorted({(t, ns) for t, ns, _ in doomed})
        gone = {(t, ns, c) for t, ns, c in doomed}
        for thread_id, ns in scopes:
            rows = self.backend.checkpoint_rows(thread_id, ns, None, None, None)
            survivors = [r for r in rows if (r[0], r[1], r[2]) not in gone]
            # A delta line stays within the rows of one snapshot (base): only survivors in
            # the lines of a removed row can have lost a link of their chain.
            bases = {r[4] for r in rows if (r[0], r[1], r[2]) in gone}
            rebase = [r for r in survivors if r[5] and r[4] in bases]
            maps = self._maps_of(rebase) if rebase else {}
            snapshots = []
            for r in rebase:
                cv, vs, state = maps[(r[0], r[1], r[2])]
                extra = {k: v for k, v in state.items() if k in ("t", "v", "u", "x")}
                snapshots.append((encode_full(cv, vs, extra), r[0], r[1], r[2]))
            keep: builtins.list[tuple[str, str]] | None = None
            if collect_values:
                kept = self._maps_of(survivors) if survivors else {}
                keep = sorted(
                    {(c, version_key(v)) for cv, _, _ in kept.values() for c, v in cv.items()}
                )
            self.backend.remove(
                thread_id, ns, [g[2] for g in doomed if g[:2] == (thread_id, ns)], snapshots, keep
            )
        self._forget(lambda key: key in scopes)

    def _forget(self, match: Any) -> None:
        with self._heads_lock:
            for key in [k for k in self._heads if match(k)]:
                del self._heads[key]
            for vkey in [k for k in self._values if match(k[:2])]:
                self._values_bytes -= len(self._values.pop(vkey)[1]) + 100

    # -- async: the sync methods in a worker thread ------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for tup in found:
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


#: how a task made by a ``Send`` or a functional API's call starts its path
_PUSH = "~__pregel_push"


def _one_task(checkpoint: Checkpoint) -> bool:
    """Whether the super-step after ``checkpoint`` runs one task, as its updated channels
    say: one node triggered (``branch:to:NODE``, ``join:...:NODE``, ``__start__``) and no
    ``Send``. Unsure (no updated channels recorded): False, and its writes are not held."""
    updated = checkpoint.get("updated_channels")
    if updated is None or "__pregel_tasks" in updated:
        return False
    nodes = set()
    for ch in updated:
        if ch.startswith("branch:to:"):
            nodes.add(ch[10:])
        elif ch.startswith("join:"):
            nodes.add(ch.rpartition(":")[2])
        elif ch == "__start__":
            nodes.add(ch)
    return len(nodes) == 1


def _matches(metadata: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return all(metadata.get(k) == v for k, v in wanted.items())


def _checked_first(check: Callable[[Any], None], then: Callable[[Any], None] | None) -> Any:
    def work(tx: Any) -> None:
        check(tx)
        if then is not None:
            then(tx)

    return work
