"""Assistants created through the LangGraph Server API: versioned configurations of a
registered task (its graph id), each version kept. ``longtask_assistants`` holds one row
per assistant with the version it runs now (``set latest`` may point it back at an older
one); ``longtask_assistant_versions`` every version made (create is 1, each update one
more). A write is one transaction, serialised with the others, so two serve processes
never make the same version number. The registered tasks' own (system) assistants are not
stored: ``serve``'s registry answers for them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any

_COLS = (
    "assistant_id, graph_id, version, name, description, config, context, metadata, "
    "owner, created_at, updated_at"
)
_VERSION_COLS = (
    "assistant_id, graph_id, version, name, description, config, context, metadata, created_at"
)


@dataclass(frozen=True)
class AssistantRow:
    assistant_id: str
    graph_id: str
    version: int
    name: str
    description: str | None
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]
    #: who created it (None for a version row): may update and delete it
    owner: str | None
    created_at: float
    updated_at: float


def _row(r: tuple[Any, ...]) -> AssistantRow:
    return AssistantRow(
        assistant_id=str(r[0]),
        graph_id=str(r[1]),
        version=int(r[2]),
        name=str(r[3]),
        description=r[4],
        config=json.loads(r[5]),
        context=json.loads(r[6]),
        metadata=json.loads(r[7]),
        owner=r[8],
        created_at=float(r[9]),
        updated_at=float(r[10]),
    )


def _version(r: tuple[Any, ...]) -> AssistantRow:
    when = float(r[8])
    return _row((*r[:8], None, when, when))


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class AssistantTables:
    """Created assistants and their versions, mixed into Store."""

    _run: Any
    _transaction: Any

    def assistant_get(self, assistant_id: str) -> AssistantRow | None:
        rows = self._run(
            f"SELECT {_COLS} FROM longtask_assistants WHERE assistant_id = ?", (assistant_id,)
        )
        return _row(rows[0]) if rows else None

    def assistants(self, graph_ids: list[str] | None = None) -> list[AssistantRow]:
        """Every created assistant (of ``graph_ids``), oldest first."""
        rows = self._run(f"SELECT {_COLS} FROM longtask_assistants ORDER BY created_at")
        found = [_row(r) for r in rows]
        if graph_ids is not None:
            found = [a for a in found if a.graph_id in graph_ids]
        return found

    def assistant_create(self, row: AssistantRow) -> AssistantRow | None:
        """Store a new assistant as its version 1; None if its id is taken (nothing
        stored)."""
        now = time.time()
        row = replace(row, version=1, created_at=now, updated_at=now)
        with self._transaction() as execute:
            if execute(
                "SELECT 1 FROM longtask_assistants WHERE assistant_id = ?", (row.assistant_id,)
            ):
                return None
            execute(
                f"INSERT INTO longtask_assistants ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    row.assistant_id,
                    row.graph_id,
                    1,
                    row.name,
                    row.description,
                    _dump(row.config),
                    _dump(row.context),
                    _dump(row.metadata),
                    row.owner,
                    now,
                    now,
                ),
            )
            self._insert_version(execute, row, 1, now)
        return row

    @staticmethod
    def _insert_version(execute: Any, row: AssistantRow, version: int, now: float) -> None:
        execute(
            f"INSERT INTO longtask_assistant_versions ({_VERSION_COLS}) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                row.assistant_id,
                row.graph_id,
                version,
                row.name,
                row.description,
                _dump(row.config),
                _dump(row.context),
                _dump(row.metadata),
                now,
            ),
        )

    def assistant_update(self, assistant_id: str, new: AssistantRow) -> AssistantRow | None:
        """Store ``new`` as the assistant's next version and make it current; None if the
        assistant is gone."""
        now = time.time()
        with self._transaction() as execute:
            found = execute(
                f"SELECT {_COLS} FROM longtask_assistants WHERE assistant_id = ?", (assistant_id,)
            )
            if not found:
                return None
            old = _row(found[0])
            top = execute(
                "SELECT MAX(version) FROM longtask_assistant_versions WHERE assistant_id = ?",
                (assistant_id,),
            )
            version = int(top[0][0] or 0) + 1
            self._insert_version(execute, new, version, now)
            execute(
                "UPDATE longtask_assistants SET graph_id = ?, version = ?, name = ?, "
                "description = ?, config = ?, context = ?, metadata = ?, updated_at = ? "
                "WHERE assistant_id = ?",
                (
                    new.graph_id,
                    version,
                    new.name,
                    new.description,
                    _dump(new.config),
                    _dump(new.context),
                    _dump(new.metadata),
                    now,
                    assistant_id,
                ),
            )
        return replace(
            new, version=version, owner=old.owner, created_at=old.created_at, updated_at=now
        )

    def assistant_set_latest(self, assistant_id: str, version: int) -> AssistantRow | None:
        """Make ``version`` the one the assistant runs; None if it has no such version."""
        now = time.time()
        with self._transaction() as execute:
            found = execute(
                f"SELECT {_VERSION_COLS} FROM longtask_assistant_versions "
                "WHERE assistant_id = ? AND version = ?",
                (assistant_id, version),
            )
            if not found:
                return None
            v = _version(found[0])
            execute(
                "UPDATE longtask_assistants SET graph_id = ?, version = ?, name = ?, "
                "description = ?, config = ?, context = ?, metadata = ?, updated_at = ? "
                "WHERE assistant_id = ?",
                (
                    v.graph_id,
                    version,
                    v.name,
                    v.description,
                    _dump(v.config),
                    _dump(v.context),
                    _dump(v.metadata),
                    now,
                    assistant_id,
                ),
            )
        return self.assistant_get(assistant_id)

    def assistant_versions(self, assistant_id: str) -> list[AssistantRow]:
        """Every version of the assistant, newest first."""
        rows = self._run(
            f"SELECT {_VERSION_COLS} FROM longtask_assistant_versions WHERE assistant_id = ? "
            "ORDER BY version DESC",
            (assistant_id,),
        )
        return [_version(r) for r in rows]

    def assistant_version(self, assistant_id: str, version: int) -> AssistantRow | None:
        rows = self._run(
            f"SELECT {_VERSION_COLS} FROM longtask_assistant_versions "
            "WHERE assistant_id = ? AND version = ?",
            (assistant_id, version),
        )
        return _version(rows[0]) if rows else None

    def assistant_delete(self, assistant_id: str) -> bool:
        """Delete the assistant and its versions (threads it ran keep their records)."""
        with self._transaction() as execute:
            gone = execute(
                "DELETE FROM longtask_assistants WHERE assistant_id = ? RETURNING assistant_id",
                (assistant_id,),
            )
            execute(
                "DELETE FROM longtask_assistant_versions WHERE assistant_id = ?", (assistant_id,)
            )
        return bool(gone)
