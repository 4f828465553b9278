"""The SQLite backend: one file, one connection shared by the saver and our tables, and
per-thread writer locks held with ``flock``."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from longtask.checkpointers._database import Database, _lock_key
from longtask.checkpointers._url import DatabaseURL
from longtask.errors import DatabaseError, ThreadBusy


def _full_disk(path: Path) -> str:
    """What to add to an error opening the SQLite file ``path`` when its disk is full:
    SQLite reports the WAL index it could not create as a bare "disk I/O error"."""
    import shutil

    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        return ""
    if free >= _ROOM_TO_OPEN:
        return ""
    return (
        f" (the disk holding it is full: {free} bytes free); free some space, then run the "
        "command again"
    )


#: below this many free bytes, a failure to open is put down to a full disk: the WAL index
#: alone takes 32 KiB
_ROOM_TO_OPEN = 64 * 1024


class SqliteDatabase(Database):
    def __init__(self, url: DatabaseURL, *, upgrade: bool, verify: bool = True) -> None:
        from longtask.checkpointers._saver_sql import SqliteBackend
        from longtask.store import SqliteStore

        assert url.path is not None
        self.url = url
        self.path = url.path
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
            # WAL lets `status` and `events` read while another process writes.
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("PRAGMA synchronous=NORMAL")
        except (sqlite3.Error, OSError) as exc:
            raise DatabaseError(
                f"cannot open SQLite database {self.path}: {exc}{_full_disk(self.path)}"
            ) from exc
        # One connection and one lock for the saver and our tables: SQLite has one writer
        # at a time, and a second connection would queue parallel steps' writes behind
        # each other's busy timeouts.
        lock = threading.Lock()
        self._wire(SqliteBackend(conn, lock))
        self._conn = conn
        self.store = SqliteStore(conn, lock)
        self.store.artifact_dir = self.path.parent / (self.path.name + ".artifacts")
        # Locks are by the file's real path: two names of one file (a symlink) are one lock.
        real = self.path.resolve()
        self._lock_dir = real.parent / (real.name + ".locks")
        if upgrade:
            self.upgrade()
        elif verify:
            self.store.check_schema(self.url.redacted)

    def upgrade(self) -> list[str]:
        def legacy() -> Any:
            from langgraph.checkpoint.sqlite import SqliteSaver

            return SqliteSaver(self._conn)

        return self._migrate(legacy, "checkpoints")

    def _lock_path(self, thread_id: str) -> Path:
        return self._lock_dir / (_lock_key(thread_id).hex() + ".lock")

    @contextlib.contextmanager
    def lock(self, thread_id: str) -> Iterator[None]:
        # flock is released by the kernel when the process dies, so a crash never leaves a
        # thread locked. SQLite is single-machine, so a local lock is enough.
        self._lock_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._lock_path(thread_id), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            # A moment's retry: `is_locked` (status) takes the lock shared for an instant,
            # which must not make a real writer give up.
            for attempt in range(20):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError as exc:
                    if attempt == 19:
                        raise ThreadBusy(thread_id) from exc
                    time.sleep(0.01)
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
            yield
        finally:
            os.close(fd)

    def is_locked(self, thread_id: str) -> bool:
        path = self._lock_path(thread_id)
        if not path.exists():
            return False
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def close(self) -> None:
        self.events.stop_live()
        self._close_saver()
        self.store.close()
