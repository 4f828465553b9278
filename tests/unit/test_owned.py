"""The list of what a thread owns (``store._owned``) against the schema itself: a migration
that adds a table or column with thread data must add it there too, or export, import and
prune would silently leave it behind."""

from __future__ import annotations

import json
from pathlib import Path

from longtask.checkpointers import Database
from longtask.store._owned import OWNED_BY_NAME, blob_refs


def test_every_table_with_a_thread_id_is_listed_with_all_its_columns(tmp_path: Path) -> None:
    with Database.open(f"sqlite:///{tmp_path / 'schema.db'}") as db:
        store = db.store
        tables = [
            str(r[0])
            for r in store._run("SELECT name FROM sqlite_master WHERE type = 'table'")
            if str(r[0]).startswith("longtask_")
        ]
        with_thread = {}
        for name in tables:
            columns = [str(c[1]) for c in store._run(f"PRAGMA table_info({name})")]
            if "thread_id" in columns:
                with_thread[name] = columns
    assert set(with_thread) == set(OWNED_BY_NAME)
    for name, columns in with_thread.items():
        table = OWNED_BY_NAME[name]
        listed = set(table.columns) | ({table.serial} if table.serial else set())
        assert listed == set(columns), name


def test_blob_references_are_found_in_msgpack_and_json() -> None:
    import ormsgpack

    digest = "0123456789abcdef0123456789abcdef01234567"
    packed = ormsgpack.packb({"x": [{"ref": digest, "size": 2000}]})
    assert blob_refs(packed) == {digest}
    assert blob_refs(json.dumps({"v": 1, "ref": digest})) == {digest}
    assert blob_refs(b'{"ref": "short"}') == set()
    assert blob_refs(None) == set()
