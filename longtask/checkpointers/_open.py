"""Open a database by URL: pick the backend its scheme names and open it.

The factory behind ``Database.open`` (the package passes it to ``_database.set_opener``).
Backends are imported lazily, so the SQLite default never imports psycopg and the CLI's
``--help`` imports neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from longtask.checkpointers._url import parse_url, resolve_url
from longtask.errors import DatabaseError

if TYPE_CHECKING:
    from longtask.checkpointers._database import Database


def open_database(url: str | None, *, upgrade: bool | None, verify: bool, create: bool) -> Database:
    """``Database.open``: see its docstring."""
    parsed = parse_url(resolve_url(url))
    if parsed.scheme == "sqlite":
        assert parsed.path is not None
        if not create and not parsed.path.exists():
            raise DatabaseError(
                f"there is no longtask database at {parsed.path.resolve()}; start a task "
                "to create it (`longtask run FILE.py:TASK`), create it empty with "
                "`longtask db upgrade`, or point --db / $LONGTASK_DB at another one"
            )
        from longtask.checkpointers._sqlite import SqliteDatabase

        return SqliteDatabase(parsed, upgrade=True if upgrade is None else upgrade, verify=verify)
    from longtask.checkpointers._postgres import PostgresDatabase

    return PostgresDatabase(parsed, upgrade=bool(upgrade), verify=verify)
