"""One write transaction of longtask's saver (a ``Batch``), on every backend: on PostgreSQL
the whole batch is one statement (``longtask_cp_write``), on SQLite a transaction of
statements; both store the same rows."""

from __future__ import annotations

import json
from typing import Any

import pytest

from longtask.checkpointers import Database
from longtask.checkpointers._saver_sql import Batch
from longtask.store import NewEvent


def _rows(db: Database, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    backend: Any = db.saver.backend
    return [
        tuple(bytes(c) if isinstance(c, memoryview) else c for c in r)
        for r in backend.read(sql, params)
    ]


def test_a_batch_stores_every_part_once(db_url: str) -> None:
    with Database.open(db_url) as db:
        backend: Any = db.saver.backend
        events = [
            NewEvent("t", "step.started", f"k{i}", stage="s", step=f"a{i % 3}", attempt=1)
            for i in range(30)
        ]
        write = ("t", "", "c1", "task", 0, "out.a", "json", b'{"x": 1}', "")
        batch = Batch(
            events=events,
            blobs={"d1": b"\x00\x01blob"},
            writes=[write, write],  # a retried task writes the same: stored once
            upserts=[
                ("t", "", "c1", "task2", -3, "__interrupt__", "json", b"1", ""),
                ("t", "", "c1", "task2", -3, "__interrupt__", "json", b"2", "p"),  # last wins
            ],
            values=[("t", "", "out.a", "0001.5", "bytes", b"\xff\x00raw")],
            checkpoint=("t", "", "c2", "c1", "c0", 2, b"D\x00state", json.dumps({"a": 1}), "r"),
        )
        backend.write("t", None, batch)
        backend.write("t", None, batch)  # repeated (a lost COMMIT answer): nothing twice

        stored = _rows(
            db,
            "SELECT kind, step, dedupe_key FROM longtask_events WHERE thread_id = ? ORDER BY id",
            "t",
        )
        assert [r[2] for r in stored] == [f"t/k{i}" for i in range(30)], "emission order"
        assert _rows(db, "SELECT data, size FROM longtask_blobs WHERE digest = ?", "d1") == [
            (b"\x00\x01blob", 6)
        ]
        assert _rows(
            db,
            "SELECT task_id, idx, channel, type, value, task_path FROM longtask_cp_writes "
            "WHERE thread_id = ? ORDER BY task_id",
            "t",
        ) == [
            ("task", 0, "out.a", "json", b'{"x": 1}', ""),
            ("task2", -3, "__interrupt__", "json", b"2", "p"),
        ]
        assert _rows(
            db,
            "SELECT channel, version, type, value FROM longtask_cp_values WHERE thread_id = ?",
            "t",
        ) == [("out.a", "0001.5", "bytes", b"\xff\x00raw")]
        assert _rows(
            db,
            "SELECT checkpoint_id, parent_id, base_id, depth, state, metadata, run_id "
            "FROM longtask_cp_checkpoints WHERE thread_id = ?",
            "t",
        ) == [("c2", "c1", "c0", 2, b"D\x00state", '{"a": 1}', "r")]


def test_a_stale_epoch_stores_nothing_of_the_batch(db_url: str) -> None:
    with Database.open(db_url) as db:
        backend: Any = db.saver.backend
        epoch = db.store.lease_take("t", "me")
        batch = Batch(
            events=[NewEvent("t", "step.started", "k", stage="s", step="a")],
            checkpoint=("t", "", "c1", None, "c1", 0, b"F", "{}", None),
        )
        with pytest.raises(Exception, match="lease lost"):
            backend.write("t", epoch + 1, batch)
        assert _rows(db, "SELECT count(*) FROM longtask_events WHERE thread_id = ?", "t") == [(0,)]
        assert _rows(
            db, "SELECT count(*) FROM longtask_cp_checkpoints WHERE thread_id = ?", "t"
        ) == [(0,)]
