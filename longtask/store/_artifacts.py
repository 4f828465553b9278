"""Artifacts: named, content-addressed outputs of a thread (reports, transcripts, patches).

The index lives in ``longtask_artifacts``; the content is stored once per digest, as a file
under ``<database dir>/<database name>.artifacts/`` for SQLite (large files stay out of the
database file) and in ``longtask_blobs`` for PostgreSQL (every machine reaches it). A name
given twice in one thread points to the newest content.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from longtask.errors import InvalidInput, LongTaskError

_COLS = "thread_id, name, step, digest, size, media_type, created_at"


@dataclass(frozen=True)
class Artifact:
    thread_id: str
    name: str
    step: str | None
    digest: str
    size: int
    media_type: str | None
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "name": self.name,
            "step": self.step,
            "digest": self.digest,
            "size": self.size,
            "media_type": self.media_type,
            "created_at": self.created_at.isoformat(),
        }


def check_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > 200 or name != name.strip():
        raise InvalidInput(
            f"artifact name {name!r} is not allowed: use 1-200 characters without leading or "
            "trailing spaces"
        )
    if any(ord(c) < 32 for c in name):
        raise InvalidInput(f"artifact name {name!r} contains control characters")


class ArtifactTables:
    """Mixed into Store. ``artifact_dir`` is set for SQLite (content as files)."""

    artifact_dir: Path | None = None

    def _run(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def put_blob(self, digest: str, data: bytes) -> None:
        raise NotImplementedError

    def _blob_statement(self, digest: str, data: bytes) -> tuple[str, tuple[Any, ...]]:
        raise NotImplementedError

    def _run_all(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        raise NotImplementedError

    def get_blob(self, digest: str) -> bytes | None:
        raise NotImplementedError

    def _path(self, digest: str) -> Path:
        assert self.artifact_dir is not None
        return self.artifact_dir / digest[:2] / digest

    def _write_file(self, digest: str, data: bytes) -> None:
        path = self._path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written aside and renamed: a crash never leaves half a file under the digest.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    def put_artifact(
        self,
        thread_id: str,
        name: str,
        data: bytes,
        *,
        step: str | None = None,
        media_type: str | None = None,
    ) -> Artifact:
        check_name(name)
        digest = hashlib.sha256(data).hexdigest()
        now = time.time()
        row = (
            f"INSERT INTO longtask_artifacts ({_COLS}) VALUES (?,?,?,?,?,?,?) "
            "ON CONFLICT (thread_id, name) DO UPDATE SET step = excluded.step, "
            "digest = excluded.digest, size = excluded.size, media_type = excluded.media_type, "
            "created_at = excluded.created_at",
            (thread_id, name, step, digest, len(data), media_type, now),
        )
        if self.artifact_dir is not None:
            if not self._path(digest).exists():
                self._write_file(digest, data)
            self._run(*row)
        else:
            # the content and the row in one transaction (one round trip on PostgreSQL)
            self._run_all([self._blob_statement(digest, data), row])
        if self.artifact_dir is not None and not self._path(digest).exists():
            # A prune removed the file between the check above and the row's insert (it
            # removes only files no row refers to): write it again.
            self._write_file(digest, data)
        return Artifact(thread_id, name, step, digest, len(data), media_type, _ts(now))

    def artifacts(self, thread_id: str) -> list[Artifact]:
        rows = self._run(
            f"SELECT {_COLS} FROM longtask_artifacts WHERE thread_id = ? ORDER BY created_at, name",
            (thread_id,),
        )
        return [_artifact(r) for r in rows]

    def artifact(self, thread_id: str, name: str) -> Artifact | None:
        rows = self._run(
            f"SELECT {_COLS} FROM longtask_artifacts WHERE thread_id = ? AND name = ?",
            (thread_id, name),
        )
        return _artifact(rows[0]) if rows else None

    def artifact_data(self, artifact: Artifact) -> bytes:
        if self.artifact_dir is not None:
            try:
                return self._path(artifact.digest).read_bytes()
            except OSError as exc:
                raise LongTaskError(
                    f"the content of artifact {artifact.name!r} ({artifact.digest}) is missing "
                    f"from {self.artifact_dir}: {exc.strerror}"
                ) from exc
        data = self.get_blob(artifact.digest)
        if data is None:
            raise LongTaskError(
                f"the content of artifact {artifact.name!r} ({artifact.digest}) is missing "
                "from longtask_blobs"
            )
        return data


def _ts(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def _artifact(r: tuple[Any, ...]) -> Artifact:
    return Artifact(r[0], r[1], r[2], r[3], int(r[4]), r[5], _ts(float(r[6])))
