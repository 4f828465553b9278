"""Moving a thread between databases: ``export`` writes one self-contained file, ``import``
loads it into another database (SQLite or PostgreSQL), all or nothing.

The file (``.ltz``) is a zip archive:

- ``manifest.json`` (first): the format name and version, the longtask version that wrote
  it, the thread id, task reference and definition hash, when and from which kind of
  database it was exported, and for every other member its sha256 and row count;
- ``tables/<table>.jsonl``: the thread's rows of each table it owns (``store._owned``), one
  JSON array per line in the manifest's column order; bytes as ``{"b64": ...}``;
- ``blobs/<digest>``: the shared values the thread refers to (``longtask_blobs``);
- ``artifacts/<sha256>``: the contents of its artifacts.

Nothing from the environment goes in, and no lease: the next advance takes a fresh one.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import os
import shlex
import stat
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from longtask.errors import (
    ExportFileInvalid,
    ExportFormatTooNew,
    ImportThreadExists,
    InvalidInput,
    MoveRefused,
    ThreadBusy,
    ThreadNotFound,
)
from longtask.runtime._threadid import check_thread_id
from longtask.store._order import chain_order
from longtask.store._owned import (
    OWNED_BY_NAME,
    carried_tables,
    existing_blobs,
    read_rows,
    refs_in_rows,
)

if TYPE_CHECKING:
    from longtask.checkpointers import Database

FORMAT = "longtask-thread"
#: bump when a reader of the previous version could misread a new file
FORMAT_VERSION = 1
MANIFEST = "manifest.json"

Rows = list[tuple[Any, ...]]


@dataclass(frozen=True)
class MoveSummary:
    """What an export wrote or an import loaded."""

    thread_id: str
    path: str
    #: rows per table
    rows: dict[str, int]
    blobs: int
    artifacts: int
    head_only: bool
    #: the thread id in the file (differs from ``thread_id`` after ``import --as``)
    source_thread_id: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _version() -> str:
    from longtask._version import __version__

    return str(__version__)


# -- export ----------------------------------------------------------------------------------


def _check_target(target: Path, force: bool) -> None:
    """Refuse a target the rename would destroy: a directory, a device or anything else
    that is not a regular file (the rename would replace the node itself), and an existing
    file unless ``force``."""
    try:
        st = target.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise InvalidInput(
            f"{target} is a directory; name the file to write, e.g. {target / 'THREAD.ltz'}"
        )
    if not stat.S_ISREG(st.st_mode):
        raise InvalidInput(
            f"{target} exists and is not a regular file (a device, link, pipe or socket); "
            "export to a file path"
        )
    if not force:
        raise InvalidInput(f"{target} exists; pass --force (force=True) to replace it")


def export_thread(
    db: Database,
    thread_id: str,
    path: str | os.PathLike[str],
    *,
    head_only: bool = False,
    force: bool = False,
) -> MoveSummary:
    """Write ``thread_id`` with everything it owns to ``path`` (see the module docstring).

    ``head_only``: only the latest checkpoint of each namespace, stored as a full snapshot,
    with its pending writes and the values it needs (history then starts there). The
    thread's writer lock is held while it is read: a running thread is refused
    (:class:`~longtask.errors.ThreadBusy`), never exported half-written.
    """
    store = db.store
    rec = store.get_thread(thread_id)
    if rec is None:
        raise ThreadNotFound(thread_id, db.url.redacted)
    _check_target(Path(path), force)
    with db.lock(thread_id):
        held = store.lease_holder(thread_id)
        # A single process holds the writer lock as well as its lease (an unreleased lease
        # of a process is one that died); a worker holds only the lease.
        if held is not None and not held[0].startswith("process:"):
            raise ThreadBusy(thread_id)
        tables = {t.name: read_rows(store, t, thread_id) for t in carried_tables()}
        if head_only:
            _keep_heads(db, tables)
        digests = existing_blobs(
            store,
            refs_in_rows(
                r
                for name in (
                    "longtask_cp_values",
                    "longtask_cp_writes",
                    "longtask_threads",
                    "longtask_map_items",
                )
                for r in tables[name]
            ),
        )
        blobs = {}
        for digest in sorted(digests):
            data = store.get_blob(digest)
            if data is not None:
                blobs[digest] = data
        artifacts = {a.digest: store.artifact_data(a) for a in store.artifacts(thread_id)}

    members: dict[str, bytes] = {}
    counts: dict[str, int] = {}
    for table in carried_tables():
        rows = tables[table.name]
        members[f"tables/{table.name}.jsonl"] = b"".join(
            json.dumps([_cell(v) for v in r], ensure_ascii=False).encode() + b"\n" for r in rows
        )
        counts[f"tables/{table.name}.jsonl"] = len(rows)
    for digest, data in blobs.items():
        members[f"blobs/{digest}"] = data
    for digest, data in artifacts.items():
        members[f"artifacts/{digest}"] = data
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "longtask_version": _version(),
        "thread_id": thread_id,
        "task_ref": rec.task_ref,
        "task_name": rec.task_name,
        "task_version": rec.task_version,
        "definition_hash": rec.definition_hash,
        "status": rec.status,
        "exported_at": datetime.now(UTC).isoformat(),
        "source_backend": db.store.dialect.name,
        "head_only": head_only,
        "columns": {t.name: list(t.columns) for t in carried_tables()},
        "members": {
            name: {
                "sha256": hashlib.sha256(data).hexdigest(),
                "bytes": len(data),
                **({"rows": counts[name]} if name in counts else {}),
            }
            for name, data in members.items()
        },
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Written aside and renamed: an interrupted export never leaves a file that looks whole.
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".export-", suffix=".ltz")
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(MANIFEST, json.dumps(manifest, indent=1))
            for name, data in members.items():
                z.writestr(name, data)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return MoveSummary(
        thread_id=thread_id,
        path=str(target),
        rows={name: len(rows) for name, rows in tables.items()},
        blobs=len(blobs),
        artifacts=len(artifacts),
        head_only=head_only,
        source_thread_id=thread_id,
    )


def _cell(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"b64": base64.b64encode(bytes(value)).decode()}
    return value


def _keep_heads(db: Database, tables: dict[str, Rows]) -> None:
    """Reduce the checkpoint tables to the latest checkpoint of each namespace, rewritten
    as a snapshot (its delta chain stays behind), with only its writes and values."""
    from longtask.checkpointers import _maps
    from longtask.checkpointers._reader import version_key

    cps = tables["longtask_cp_checkpoints"]
    latest: dict[str, tuple[Any, ...]] = {}
    for r in cps:  # ordered by (ns, seq): the last of a namespace is its newest
        latest[r[1]] = r
    heads = list(latest.values())
    # _maps_of wants the saver's row layout (see checkpoint_rows): the same first 9 columns
    maps = db.saver._maps_of(heads) if heads else {}
    rewritten = []
    needed: set[tuple[str, str, str]] = set()
    for r in heads:
        cv, vs, state = maps[(r[0], r[1], r[2])]
        extra = {k: v for k, v in state.items() if k in ("t", "v", "u", "x")}
        snapshot = _maps.encode_full(cv, vs, extra)
        rewritten.append((r[0], r[1], r[2], None, r[2], 0, snapshot, r[7], r[8], r[9]))
        needed |= {(r[1], c, version_key(v)) for c, v in cv.items()}
    tables["longtask_cp_checkpoints"] = rewritten
    kept = {(r[1], r[2]) for r in heads}
    tables["longtask_cp_writes"] = [w for w in tables["longtask_cp_writes"] if (w[1], w[2]) in kept]
    tables["longtask_cp_values"] = [
        v for v in tables["longtask_cp_values"] if (v[1], v[2], v[3]) in needed
    ]


# -- reading a file --------------------------------------------------------------------------


@dataclass
class _Export:
    manifest: dict[str, Any]
    tables: dict[str, Rows]
    columns: dict[str, list[str]]
    blobs: dict[str, bytes]
    artifacts: dict[str, bytes]


#: the most an import reads: the export's members, unpacked, are held in memory at once
MAX_IMPORT_BYTES = 2 * 1024**3


def _open_export(where: str) -> Any:
    """The export file, opened for reading, or a refusal of anything that is not a regular
    file: a FIFO would block the read forever, a device node (``/dev/zero``) would be read
    until memory runs out. Checked on the open file (``O_NONBLOCK``: opening a FIFO does not
    wait for a writer), so nothing can be swapped in between the check and the read."""
    fd = os.open(where, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ExportFileInvalid(
                f"{where} is a directory; give the file `longtask export` wrote (FILE.ltz)"
            )
        if not stat.S_ISREG(st.st_mode):
            raise ExportFileInvalid(
                f"{where} is not a regular file (a pipe, device or socket); copy the export "
                "to a file and import that file"
            )
        if st.st_size > MAX_IMPORT_BYTES:
            raise ExportFileInvalid(_too_large(where, "holds", st.st_size))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _too_large(where: str, verb: str, size: int) -> str:
    return (
        f"{where} {verb} {size} bytes, more than an import reads ({MAX_IMPORT_BYTES}); "
        "export the thread with --head-only (its latest checkpoint), or prune it first"
    )


def read_export(path: str | os.PathLike[str]) -> _Export:
    """Open and verify an export: every refusal names the problem; nothing is written."""
    where = str(path)
    try:
        with _open_export(where) as f, zipfile.ZipFile(f) as z:
            names = z.namelist()
            # What the members unpack to, as the archive declares it (a member is never read
            # past its declared size): a small file that unpacks to more is refused unread.
            unpacked = sum(info.file_size for info in z.infolist())
            if unpacked > MAX_IMPORT_BYTES:
                raise ExportFileInvalid(_too_large(where, "unpacks to", unpacked))
            if MANIFEST not in names:
                raise ExportFileInvalid(
                    f"{where} is not a longtask export: it has no {MANIFEST}. Make one with "
                    "`longtask export THREAD -o FILE.ltz`"
                )
            manifest = _manifest(where, z.read(MANIFEST))
            members: dict[str, bytes] = {}
            listed = manifest.get("members")
            if not isinstance(listed, dict):
                raise ExportFileInvalid(f"{where}: its manifest lists no members")
            extra = sorted(set(names) - set(listed) - {MANIFEST})
            if extra:
                raise ExportFileInvalid(
                    f"{where} holds members its manifest does not list ({', '.join(extra[:3])})"
                    "; the file was altered after export"
                )
            for name, info in listed.items():
                if name not in names:
                    raise ExportFileInvalid(
                        f"{where} is incomplete: member {name} is missing; export the thread again"
                    )
                data = z.read(name)
                if hashlib.sha256(data).hexdigest() != info.get("sha256"):
                    raise ExportFileInvalid(
                        f"{where} is corrupt: member {name} does not match its checksum; "
                        "export the thread again"
                    )
                members[name] = data
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, KeyError) as exc:
        raise ExportFileInvalid(
            f"{where} is corrupt or not a longtask export ({exc}); export the thread again"
        ) from exc
    except OSError as exc:
        raise ExportFileInvalid(f"cannot read {where}: {exc.strerror or exc}") from exc
    except MoveRefused:
        raise
    except Exception as exc:  # zlib errors, CRC failures: the bytes are damaged
        raise ExportFileInvalid(
            f"{where} is corrupt ({type(exc).__name__}: {exc}); export the thread again"
        ) from exc

    columns: dict[str, list[str]] = manifest.get("columns") or {}
    tables: dict[str, Rows] = {}
    for table in carried_tables():
        name = f"tables/{table.name}.jsonl"
        cols = columns.get(table.name)
        if name not in members or cols is None:
            tables[table.name] = []
            columns[table.name] = list(table.columns)
            continue
        unknown = [c for c in cols if c not in table.columns]
        if unknown:
            raise ExportFileInvalid(
                f"{where}: table {table.name} has columns this longtask does not know "
                f"({', '.join(unknown)}); upgrade longtask to at least "
                f"{manifest.get('longtask_version')}"
            )
        rows = []
        for line in members[name].splitlines():
            cells = json.loads(line)
            if not isinstance(cells, list) or len(cells) != len(cols):
                raise ExportFileInvalid(f"{where}: a row of {table.name} is malformed")
            rows.append(tuple(_uncell(c) for c in cells))
        tables[table.name] = rows
    _numbered(where, tables, columns)
    unknown_tables = sorted(
        n[len("tables/") : -len(".jsonl")]
        for n in members
        if n.startswith("tables/") and n[len("tables/") : -len(".jsonl")] not in OWNED_BY_NAME
    )
    if unknown_tables:
        raise ExportFileInvalid(
            f"{where} has tables this longtask does not know ({', '.join(unknown_tables)}); "
            f"upgrade longtask to at least {manifest.get('longtask_version')}"
        )
    threads = tables["longtask_threads"]
    if len(threads) != 1 or threads[0][0] != manifest.get("thread_id"):
        raise ExportFileInvalid(f"{where}: the thread record does not match its manifest")
    blobs = {n[len("blobs/") :]: d for n, d in members.items() if n.startswith("blobs/")}
    artifacts = {
        n[len("artifacts/") :]: d for n, d in members.items() if n.startswith("artifacts/")
    }
    # Contents are stored under their digest (an artifact's names a file on SQLite): each
    # must be the digest of its bytes.
    for digest, data in blobs.items():
        if hashlib.sha256(data).hexdigest()[: len(digest)] != digest or len(digest) != 40:
            raise ExportFileInvalid(f"{where}: blob {digest!r} does not match its content")
    for digest, data in artifacts.items():
        if hashlib.sha256(data).hexdigest() != digest:
            raise ExportFileInvalid(f"{where}: artifact content {digest!r} does not match")
    digest_col = columns["longtask_artifacts"].index("digest")
    missing = {r[digest_col] for r in tables["longtask_artifacts"]} - set(artifacts)
    if missing:
        raise ExportFileInvalid(
            f"{where} lacks the content of {len(missing)} artifact(s); export the thread again"
        )
    return _Export(manifest, tables, columns, blobs, artifacts)


def _numbered(where: str, tables: dict[str, Rows], columns: dict[str, list[str]]) -> None:
    """The checkpoints' sequence numbers (their order in the thread, see store._order):
    checked when the file has them, derived from the parent links when it was written
    before they existed."""
    name = "longtask_cp_checkpoints"
    cols = columns[name]
    if "seq" in cols:
        i = cols.index("seq")
        if any(type(r[i]) is not int for r in tables[name]):
            raise ExportFileInvalid(f"{where}: a row of {name} is malformed")
        return
    rows = tables[name]
    keys = ("checkpoint_ns", "checkpoint_id", "parent_id")
    if rows and any(c not in cols for c in keys):
        raise ExportFileInvalid(f"{where}: table {name} lacks columns {', '.join(keys)}")
    ns, cid, parent = (cols.index(c) if c in cols else 0 for c in keys)
    if any(
        not isinstance(r[ns], str)
        or not isinstance(r[cid], str)
        or not isinstance(r[parent], str | None)
        for r in rows
    ):
        raise ExportFileInvalid(f"{where}: a row of {name} is malformed")
    place = {
        key: n for n, key in enumerate(chain_order((r[ns], r[cid], r[parent]) for r in rows), 1)
    }
    tables[name] = [(*r, place[(r[ns], r[cid])]) for r in rows]
    columns[name] = [*cols, "seq"]


def _manifest(where: str, raw: bytes) -> dict[str, Any]:
    try:
        manifest = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ExportFileInvalid(f"{where}: its {MANIFEST} is not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ExportFileInvalid(f"{where} is not a longtask thread export")
    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ExportFileInvalid(f"{where}: its manifest has no format version")
    if version > FORMAT_VERSION:
        wrote = manifest.get("longtask_version", "a newer version")
        raise ExportFormatTooNew(
            f"{where} is in export format {version}, written by longtask {wrote}; this "
            f"longtask ({_version()}) reads format {FORMAT_VERSION} and older. Upgrade "
            f"langgraph-longtask to at least {wrote} to import it"
        )
    return manifest


def _uncell(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    return value


# -- import ----------------------------------------------------------------------------------


def import_thread(
    db: Database, path: str | os.PathLike[str], *, as_id: str | None = None
) -> MoveSummary:
    """Load an export into ``db``, as its own thread id or as ``as_id``, in one transaction:
    a refused or failed import leaves the database as it was."""
    from longtask.ops._renaming import rename

    export = read_export(path)
    source_id = str(export.manifest["thread_id"])
    new_id = as_id or source_id
    check_thread_id(new_id)
    tables = export.tables
    if new_id != source_id:
        tables = rename(db, export.tables, export.columns, source_id, new_id)
    store = db.store
    if store.dialect.name == "sqlite" and "mode" in export.columns["longtask_threads"]:
        # Workers share threads through PostgreSQL: in an SQLite database the thread is
        # continued by the process that resumes it.
        i = export.columns["longtask_threads"].index("mode")
        tables = {
            **tables,
            "longtask_threads": [(*r[:i], None, *r[i + 1 :]) for r in tables["longtask_threads"]],
        }
    if store.get_thread(new_id) is not None or store.checkpoint_tree(new_id):
        raise ImportThreadExists(new_id, db.url.redacted, str(path))

    created_files: list[Path] = []
    if store.artifact_dir is not None:
        # Files first (content-addressed, renamed into place): a failed transaction below
        # removes the ones this import created.
        for digest, data in export.artifacts.items():
            target = store.artifact_dir / digest[:2] / digest
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
            created_files.append(target)
    blobs = dict(export.blobs)
    if store.artifact_dir is None:
        blobs.update(export.artifacts)
    try:
        _write_thread(
            db,
            new_id,
            tables,
            export.columns,
            blobs,
            lambda: ImportThreadExists(new_id, db.url.redacted, str(path)),
        )
    except BaseException as exc:
        for created in created_files:
            with contextlib.suppress(OSError):
                created.unlink()
        if type(exc).__name__ == "IntegrityError":  # sqlite3's or psycopg's
            raise MoveRefused(
                f"the rows of thread {new_id!r} conflict with rows already in "
                f"{db.url.redacted} ({str(exc).splitlines()[0]}); nothing was imported. "
                "Rows of a thread deleted by hand may be left over: import it under another "
                f"id with `longtask import {shlex.quote(str(path))} --as NEW_ID`"
            ) from exc
        raise
    return MoveSummary(
        thread_id=new_id,
        path=str(path),
        rows={name: len(rows) for name, rows in tables.items()},
        blobs=len(export.blobs),
        artifacts=len(export.artifacts),
        head_only=bool(export.manifest.get("head_only")),
        source_thread_id=source_id,
    )


def _write_thread(
    db: Database,
    new_id: str,
    tables: dict[str, Rows],
    columns: dict[str, list[str]],
    blobs: dict[str, bytes],
    taken: Callable[[], Exception],
) -> None:
    """Store a thread's rows (``tables``, with each table's ``columns``) and the blobs they
    refer to in one transaction; ``taken()`` is raised, rolling it back, when the thread's
    id is taken by then."""
    from longtask.checkpointers._saver_sql import Batch

    def work(tx: Any) -> None:
        now = time.time()
        if blobs:
            tx.executemany(
                "INSERT INTO longtask_blobs (digest, data, size, created_at) VALUES (?,?,?,?) "
                "ON CONFLICT (digest) DO NOTHING",
                [(d, data, len(data), now) for d, data in sorted(blobs.items())],
            )
        for table in carried_tables():
            rows = tables[table.name]
            cols = columns[table.name]
            if table.name == "longtask_threads":
                # The record goes first, and only if the id is free: a thread created
                # since it was checked makes this transaction roll back.
                got = tx.execute(
                    table.insert_sql(cols) + " ON CONFLICT (thread_id) DO NOTHING "
                    "RETURNING thread_id",
                    rows[0],
                )
                if not got:
                    raise taken()
                continue
            if table.name == "longtask_usage":
                # The events stored above made these rows (a trigger); the carried ones,
                # with what the steps were charged, are the thread's.
                tx.execute(table.delete_sql(), (new_id,))
            if rows:
                tx.executemany(table.insert_sql(cols), rows)

    db.saver.backend.write(new_id, None, Batch(then=work))


class Moves:
    """Moving threads between databases: ``export_thread`` and ``import_thread`` on ``db``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def export_thread(
        self,
        thread_id: str,
        path: str | os.PathLike[str],
        *,
        head_only: bool = False,
        force: bool = False,
    ) -> MoveSummary:
        """Write the thread to one file that ``import_thread`` (or ``longtask import``)
        loads into another database; see :func:`export_thread`."""
        return export_thread(self.db, thread_id, path, head_only=head_only, force=force)

    def import_thread(
        self, path: str | os.PathLike[str], *, as_id: str | None = None
    ) -> MoveSummary:
        """Load a thread exported by ``export_thread`` into this database (as ``as_id`` if
        given); refused, with nothing written, if the file is corrupt, from a newer format,
        or the thread id is taken."""
        return import_thread(self.db, path, as_id=as_id)


__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MoveSummary",
    "Moves",
    "export_thread",
    "import_thread",
    "read_export",
]
