"""Retention: ``Runner.prune`` deletes old finished threads with everything they own.

Only threads that ended (completed, failed, cancelled) and were last updated before a cutoff
are pruned, one thread per short transaction: the thread's writer lock is taken (a busy
thread is skipped) and, inside the transaction, the thread is checked again (still ended,
still old, no command waiting, no live lease), so a thread that came alive since it was
selected is kept. Blobs and artifact files are freed at the end when nothing refers to them
any more (see ``longtask.store._retention``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from longtask.errors import InvalidInput, ThreadBusy, ThreadNotFound
from longtask.store import FINAL_STATUSES
from longtask.store import _retention as ret

if TYPE_CHECKING:
    from longtask.checkpointers import Database

log = logging.getLogger("longtask.runtime")

#: threads selected per page (each then deleted in its own transaction)
BATCH = 100
#: blobs and artifact files collected before they are freed in the middle of a prune (each
#: freeing reads the rows that can refer to one, once)
SWEEP_AT = 100_000
#: the PostgreSQL advisory lock that lets one worker at a time run a scheduled prune
PRUNE_LOCK = 7428061905413

# ASCII digits only (\d would take "٣٠d"), a whole number, the unit right after it: the
# README's forms, and nothing else.
_DURATION = re.compile(r"([0-9]{1,9})([smhdw])", re.ASCII)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: the longest age (100 years): a longer one is a typo, and timedelta overflows
_LONGEST = 36500 * 86400

Age = timedelta | float | str | None


def parse_duration(text: str, what: str = "duration") -> timedelta:
    """``90m``, ``12h``, ``30d``, ``2w`` (also ``45s``) as a timedelta."""
    m = _DURATION.fullmatch(text or "")
    if not m:
        raise InvalidInput(
            f"{what} {text!r} is not a duration: write a whole number and a unit, like 90m, "
            "12h, 30d or 2w (s, m, h, d, w)"
        )
    seconds = int(m.group(1)) * _UNITS[m.group(2)]
    if seconds > _LONGEST:
        raise InvalidInput(f"{what} {text!r} is too long: at most {_LONGEST // 86400}d")
    return timedelta(seconds=seconds)


def _age(value: Age, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = parse_duration(value, what)
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise InvalidInput(f"{what} must not be negative, not {value!r}")
    return seconds


@dataclass
class PruneReport:
    """What a prune deleted (or, with ``dry_run``, would delete)."""

    dry_run: bool
    keep_last_checkpoint: bool
    #: (thread_id, status) of every thread pruned
    threads: list[tuple[str, str]] = field(default_factory=list)
    #: rows deleted per table
    rows: dict[str, int] = field(default_factory=dict)
    #: threads left alone because they came alive or were busy when their turn came
    skipped: list[str] = field(default_factory=list)
    blobs: int = 0
    blob_bytes: int = 0
    artifact_files: int = 0
    artifact_bytes: int = 0

    @property
    def by_status(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, status in self.threads:
            out[status] = out.get(status, 0) + 1
        return out

    def _add(self, rows: dict[str, int]) -> None:
        for table, n in rows.items():
            if n:
                self.rows[table] = self.rows.get(table, 0) + n

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "keep_last_checkpoint": self.keep_last_checkpoint,
            "threads": [{"thread_id": t, "status": s} for t, s in self.threads],
            "by_status": self.by_status,
            "rows": dict(sorted(self.rows.items())),
            "skipped": self.skipped,
            "blobs": self.blobs,
            "blob_bytes": self.blob_bytes,
            "artifact_files": self.artifact_files,
            "artifact_bytes": self.artifact_bytes,
        }


class Retention:
    """Deleting ended threads: ``prune`` by age, ``delete`` one by id, with the rows, blobs
    and files they own. ``clock`` decides ages (the database server's on PostgreSQL)."""

    def __init__(self, db: Database, clock: Callable[[], datetime]) -> None:
        self.db = db
        self.clock = clock

    def prune(
        self,
        *,
        completed_before: Age = None,
        failed_before: Age = None,
        cancelled_before: Age = None,
        keep_last_checkpoint: bool = False,
        dry_run: bool = False,
        batch: int = BATCH,
    ) -> PruneReport:
        """Delete threads that ended long enough ago, with everything they own: checkpoints,
        writes, events, the effect ledger, attempts, budgets, maps, timers, leases, inbox,
        API runs, artifacts, and the blobs and artifact files nothing else refers to.

        Ages are a ``timedelta``, seconds, or text like ``30d``, ``12h``, ``90m``: a
        completed thread last updated more than ``completed_before`` ago goes, likewise a
        failed one for ``failed_before``, and a cancelled one for ``cancelled_before``
        (default: ``failed_before``). A thread that is running or paused is never pruned,
        nor one that a process or worker holds.

        ``keep_last_checkpoint``: keep the thread, its latest checkpoint (its results and
        status stay readable), artifacts, map results and effect ledger; drop the older
        checkpoints, events, attempts, timers and API runs. ``dry_run``: change nothing and
        report what would go (blobs are not estimated with ``keep_last_checkpoint``).
        """
        ages = {
            "completed": _age(completed_before, "completed_before"),
            "failed": _age(failed_before, "failed_before"),
            "cancelled": _age(
                cancelled_before if cancelled_before is not None else failed_before,
                "cancelled_before",
            ),
        }
        if all(a is None for a in ages.values()):
            raise InvalidInput(
                "nothing to prune: give an age for completed and/or failed threads "
                "(completed_before=..., failed_before=...; on the command line "
                "--completed-before 30d, --failed-before 90d)"
            )
        if batch < 1:
            raise InvalidInput(f"batch must be at least 1, not {batch}")
        started = time.time()
        now = self.clock().timestamp()
        cutoffs = {s: now - a for s, a in ages.items() if a is not None}
        report = PruneReport(dry_run=dry_run, keep_last_checkpoint=keep_last_checkpoint)
        store = self.db.store
        blobs: set[str] = set()
        files: set[str] = set()
        pruned: set[str] = set()
        after: tuple[float, str] | None = None
        while True:
            page = ret.candidates(store, cutoffs, after, batch)
            for cand in page:
                rows: dict[str, int] = {}
                if dry_run:
                    rows = self._prune_preview(cand, keep_last_checkpoint)
                    done = True
                else:
                    cutoff = cutoffs[cand.status]
                    done = self._prune_one(cand, cutoff, keep_last_checkpoint, rows, blobs, files)
                if not done:
                    report.skipped.append(cand.thread_id)
                    continue
                if not rows:
                    continue  # keep_last_checkpoint on a thread already pruned so
                report._add(rows)
                report.threads.append((cand.thread_id, cand.status))
                pruned.add(cand.thread_id)
            if len(page) < batch:
                break
            after = (page[-1].updated_at, page[-1].thread_id)
            if not dry_run and len(blobs) + len(files) >= SWEEP_AT:
                # A long backlog: free what is collected so far (bounded memory).
                self._free(report, pruned, started, blobs, files)
        self._free(report, pruned, started, blobs, files)
        return report

    def delete(self, thread_id: str, *, dry_run: bool = False) -> PruneReport:
        """Delete one ended thread (completed, failed, cancelled) now, with everything it
        owns, as ``prune`` deletes an old one: the same tables, blobs and artifact files.

        Refused (nothing changes) for a thread that has not ended (running, paused, waiting:
        cancel it first), one a process is advancing, or one with a command waiting for a
        worker. ``dry_run``: change nothing and report what would go."""
        cand = self._ended(thread_id, "delete")
        report = PruneReport(dry_run=dry_run, keep_last_checkpoint=False)
        started = time.time()
        blobs: set[str] = set()
        files: set[str] = set()
        deleted: dict[str, int] = {}
        if dry_run:
            deleted = self._prune_preview(cand, False)
        # Deleted only if it is unchanged since read: same status, no update, no command
        # waiting, no lease taken since (a run on its way).
        elif not self._prune_one(
            cand, math.nextafter(cand.updated_at, math.inf), False, deleted, blobs, files
        ):
            raise ThreadBusy(thread_id)
        report._add(deleted)
        report.threads.append((thread_id, cand.status))
        self._free(report, {thread_id}, started, blobs, files)
        return report

    def _ended(self, thread_id: str, verb: str) -> ret.Candidate:
        """The thread as a candidate to ``verb`` (delete, prune): ThreadNotFound, or
        InvalidInput naming the cancel, unless it has ended."""
        rows = self.db.store._run(
            "SELECT status, updated_at FROM longtask_threads WHERE thread_id = ?", (thread_id,)
        )
        if not rows:
            raise ThreadNotFound(thread_id, self.db.url.redacted)
        cand = ret.Candidate(thread_id, str(rows[0][0]), float(rows[0][1]))
        if cand.status not in FINAL_STATUSES:
            past = "deleted" if verb == "delete" else "pruned"
            raise InvalidInput(
                f"thread {thread_id!r} is {cand.status}, not ended: only a completed, failed "
                f"or cancelled thread can be {past}. Cancel it first (`longtask cancel "
                f"{thread_id}`), then {verb} it"
            )
        return cand

    def trim(self, thread_id: str) -> PruneReport:
        """Keep one ended thread with only its latest checkpoint, now: what ``prune`` does
        with ``keep_last_checkpoint`` to an old one (its results, artifacts, map results and
        effect ledger stay; older checkpoints, events, attempts, timers and API runs go).
        Refused as ``delete`` refuses (a thread that has not ended, or is busy)."""
        cand = self._ended(thread_id, "prune")
        report = PruneReport(dry_run=False, keep_last_checkpoint=True)
        started = time.time()
        blobs: set[str] = set()
        files: set[str] = set()
        deleted: dict[str, int] = {}
        if not self._prune_one(
            cand, math.nextafter(cand.updated_at, math.inf), True, deleted, blobs, files
        ):
            raise ThreadBusy(thread_id)
        report._add(deleted)
        if deleted:
            report.threads.append((thread_id, cand.status))
        self._free(report, {thread_id}, started, blobs, files)
        return report

    # -- one thread --------------------------------------------------------------------------

    def _prune_preview(self, cand: ret.Candidate, keep_last: bool) -> dict[str, int]:
        store = self.db.store
        if keep_last:
            rows = ret.count_rows(store, cand.thread_id, ret.HISTORY)
            rows["longtask_cp_checkpoints"] = len(
                self.db.saver.backend.rows_but_latest(cand.thread_id)
            )
            return {t: n for t, n in rows.items() if n}
        return ret.count_rows(store, cand.thread_id)

    def _prune_one(
        self,
        cand: ret.Candidate,
        cutoff: float,
        keep_last: bool,
        rows: dict[str, int],
        blobs: set[str],
        files: set[str],
    ) -> bool:
        """Prune one thread under its writer lock; False when it was busy or came alive.
        Fills ``rows`` (deleted per table), and the blobs and artifact files it referred to
        (freed at the end if nothing else refers to them)."""
        store = self.db.store
        try:
            with self.db.lock(cand.thread_id):
                if keep_last:
                    before = len(self.db.saver.backend.rows_but_latest(cand.thread_id))
                    counts = ret.count_rows(store, cand.thread_id, ret.HISTORY)
                    if not before and not any(counts.values()):
                        return True  # nothing left to drop
                    blobs.update(ret.blob_refs(store, cand.thread_id))
                    deleted = ret.delete_thread_rows(store, cand, cutoff, ret.HISTORY)
                    if deleted is None:
                        return False
                    values = ret.count_rows(store, cand.thread_id, _CP)
                    self.db.saver.prune([cand.thread_id], strategy="keep_latest")
                    after = ret.count_rows(store, cand.thread_id, _CP)
                    deleted.update({t: values[t] - after[t] for t in _CP})
                else:
                    blobs.update(ret.blob_refs(store, cand.thread_id))
                    files.update(ret.artifact_digests(store, cand.thread_id))
                    deleted = ret.delete_thread_rows(store, cand, cutoff, ret.OWNED)
                    if deleted is None:
                        return False
                    # Rows are gone; this drops the saver's cached heads and values of it.
                    self.db.saver.delete_thread(cand.thread_id)
        except ThreadBusy:
            return False
        rows.update({t: n for t, n in deleted.items() if n})
        return True

    # -- blobs -------------------------------------------------------------------------------

    def _free(
        self,
        report: PruneReport,
        pruned: set[str],
        started: float,
        blobs: set[str],
        files: set[str],
    ) -> None:
        store = self.db.store
        if report.dry_run:
            if report.keep_last_checkpoint:
                return
            for tid in pruned:
                blobs |= ret.blob_refs(store, tid)
                if store.artifact_dir is not None:
                    files |= ret.artifact_digests(store, tid)
            gone = blobs - ret.referenced(store, blobs, exclude=pruned)
            if gone:
                report.blobs, report.blob_bytes = _blob_sizes(store, gone, pruned, started)
            kept_files = _artifact_users(store, files, pruned)
            for digest in files - kept_files:
                path = store._path(digest)
                if path.exists():
                    report.artifact_files += 1
                    report.artifact_bytes += path.stat().st_size
            return
        if blobs:
            gone = blobs - ret.referenced(store, blobs)
            n, size = ret.delete_blobs(store, gone, started - ret.BLOB_GRACE)
            report.blobs += n
            report.blob_bytes += size
        if files:
            n, size = ret.delete_artifact_files(store, files)
            report.artifact_files += n
            report.artifact_bytes += size
        blobs.clear()
        files.clear()


_CP = ("longtask_cp_checkpoints", "longtask_cp_values", "longtask_cp_writes")


def _blob_sizes(store: Any, digests: set[str], pruned: set[str], started: float) -> tuple[int, int]:
    """How many of these blobs a prune would delete, and their bytes (dry run)."""
    count = size = 0
    items = sorted(digests)
    for start in range(0, len(items), 500):
        chunk = items[start : start + 500]
        marks = ",".join("?" for _ in chunk)
        rows = store._run(
            f"SELECT digest, size FROM longtask_blobs WHERE digest IN ({marks}) AND created_at < ?",
            (*chunk, started - ret.BLOB_GRACE),
        )
        users = _artifact_users(store, {str(r[0]) for r in rows}, pruned)
        for r in rows:
            if str(r[0]) not in users:
                count += 1
                size += int(r[1])
    return count, size


def _artifact_users(store: Any, digests: set[str], pruned: set[str]) -> set[str]:
    """Which of these digests an artifact of a thread not in ``pruned`` refers to."""
    out: set[str] = set()
    items = sorted(digests)
    for start in range(0, len(items), 500):
        chunk = items[start : start + 500]
        marks = ",".join("?" for _ in chunk)
        rows = store._run(
            f"SELECT digest, thread_id FROM longtask_artifacts WHERE digest IN ({marks})", chunk
        )
        out.update(str(r[0]) for r in rows if r[1] not in pruned)
    return out


class Prunes(Protocol):
    """What a scheduled prune needs: a database and its ``prune`` (a Runner, a Retention)."""

    @property
    def db(self) -> Database: ...

    def prune(
        self,
        *,
        completed_before: Age = ...,
        failed_before: Age = ...,
        keep_last_checkpoint: bool = ...,
    ) -> PruneReport: ...


@dataclass(frozen=True)
class PruneSchedule:
    """A worker's scheduled prune (``longtask worker --prune-...``): the ages, and every how
    many seconds it runs (one worker at a time)."""

    completed_before: timedelta | None = None
    failed_before: timedelta | None = None
    keep_last_checkpoint: bool = False
    every: float = 6 * 3600.0

    def run(self, runner: Prunes) -> PruneReport | None:
        """Prune now, unless another process is pruning (then None)."""
        with prune_turn(runner.db) as mine:
            if not mine:
                return None
            return runner.prune(
                completed_before=self.completed_before,
                failed_before=self.failed_before,
                keep_last_checkpoint=self.keep_last_checkpoint,
            )


@contextlib.contextmanager
def prune_turn(db: Any) -> Iterator[bool]:
    """Whether this process may run a scheduled prune now: on PostgreSQL one process at a
    time (a session advisory lock, on a connection of its own so the pool keeps all of
    its connections for the steps; released when the prune ends or the process dies).
    SQLite: always."""
    if db.url.scheme == "sqlite":
        yield True
        return
    import psycopg

    with psycopg.connect(db.url.raw, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (PRUNE_LOCK,)).fetchone()
        yield bool(row and row[0])
