"""Which threads a person may see, decided in the database: the threads they own, those
whose pending approval names them among its approvers (issue 41), and those whose approval
they answered (issue 50: ``longtask_answerers``, made from the ``approval.resolved`` events).

``serve``'s lists, searches and counts page with ``LIMIT``/``OFFSET`` over what the caller
sees, so the condition is in the query: the server never reads every thread's owner to
filter them itself. A paused thread's record keeps what it waits for (``waiting``, each
pause's summary with its ``approvers``), so "names them" is a JSON test of that column.
With LangGraph's auth handlers, a search filter of plain keys and string values (the
owner-only handler's ``{"owner": "alice"}``) is matched in the query too, on the metadata
the API keeps (``simple_filter``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from longtask.store._schema import POSTGRES, Dialect

#: a thread as the Server API sees it: longtask's threads, and those the API created and
#: no run has started yet (their owner and creation time on the API's row)
_ALL_THREADS = (
    "SELECT t.thread_id, t.owner, t.status, t.waiting, t.created_at, t.updated_at, "
    "m.metadata FROM longtask_threads t "
    "LEFT JOIN longtask_api_threads m ON m.thread_id = t.thread_id "
    "UNION ALL "
    "SELECT a.thread_id, a.owner, NULL, NULL, a.created_at, a.created_at, a.metadata "
    "FROM longtask_api_threads a WHERE NOT EXISTS "
    "(SELECT 1 FROM longtask_threads l WHERE l.thread_id = a.thread_id)"
)

#: what a page of threads may be ordered by (the Server API's ``sort_by``)
VISIBLE_ORDER = {
    "thread_id": "v.thread_id",
    "created_at": "v.created_at",
    "updated_at": "v.updated_at",
}


#: a metadata key the query matches (another is matched in Python, as it always can be)
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,200}")


def simple_filter(filters: Any) -> dict[str, str] | None:
    """An auth handler's filter as ``{key: value}`` if the query can match it (plain keys,
    each with a string or ``{"$eq": string}``), else None."""
    if not isinstance(filters, Mapping) or not filters:
        return None
    out: dict[str, str] = {}
    for key, want in filters.items():
        if isinstance(want, Mapping) and len(want) == 1 and "$eq" in want:
            want = want["$eq"]
        if not isinstance(key, str) or not _PLAIN_KEY.fullmatch(key) or not isinstance(want, str):
            return None
        out[key] = want
    return out


def named_by_approval(dialect: Dialect, name: str, t: str = "t") -> tuple[str, tuple[Any, ...]]:
    """The SQL condition that the thread row aliased ``t`` (``status``, ``waiting``) waits
    for an approval that names ``name`` among its approvers."""
    if dialect is POSTGRES:
        approvers = (
            f"EXISTS (SELECT 1 FROM jsonb_array_elements(CAST({t}.waiting AS jsonb)) w, "
            "jsonb_array_elements_text(CASE WHEN jsonb_typeof(w.value -> 'approvers') = "
            "'array' THEN w.value -> 'approvers' ELSE CAST('[]' AS jsonb) END) a "
            "WHERE a = ?)"
        )
    else:
        approvers = (
            f"EXISTS (SELECT 1 FROM json_each({t}.waiting) w, "
            "json_each(w.value, '$.approvers') a WHERE a.value = ?)"
        )
    return f"({t}.status = 'waiting_user' AND {approvers})", (name,)


def answered_by(name: str, t: str = "t") -> tuple[str, tuple[Any, ...]]:
    """The SQL condition that ``name`` answered an approval of the thread row aliased ``t``
    (``longtask_answerers``, made from the ``approval.resolved`` events: a key lookup)."""
    return (
        "EXISTS (SELECT 1 FROM longtask_answerers aw "
        f"WHERE aw.thread_id = {t}.thread_id AND aw.name = ?)",
        (name,),
    )


def reached_by(dialect: Dialect, name: str, t: str = "t") -> tuple[str, tuple[Any, ...]]:
    """The SQL condition that a pause of the thread row aliased ``t`` reaches ``name``: a
    pending approval names them, or they answered one."""
    named, params = named_by_approval(dialect, name, t)
    answered, given = answered_by(name, t)
    return f"({named} OR {answered})", (*params, *given)


def seen_by(dialect: Dialect, name: str, t: str = "t") -> tuple[str, tuple[Any, ...]]:
    """The SQL condition (and its parameters) that the thread row aliased ``t`` (columns
    ``thread_id``, ``owner``, ``status``, ``waiting``) is owned by ``name``, waits for an
    approval that names ``name`` among its approvers, or had one that ``name`` answered."""
    reached, params = reached_by(dialect, name, t)
    return f"({t}.owner = ? OR {reached})", (name, *params)


def _metadata_is(
    dialect: Dialect, filters: Mapping[str, str], column: str = "v.metadata"
) -> tuple[str, list[Any]]:
    """The SQL condition that ``column`` (JSON text) has each key with that string."""
    parts: list[str] = []
    params: list[Any] = []
    for key, want in filters.items():
        if dialect is POSTGRES:
            parts.append(
                f"(jsonb_typeof(CAST({column} AS jsonb) -> ?) = 'string' "
                f"AND CAST({column} AS jsonb) ->> ? = ?)"
            )
            params += [key, key, want]
        else:
            path = f'$."{key}"'  # a plain key (_PLAIN_KEY): nothing to escape
            parts.append(f"(json_type({column}, ?) = 'text' AND json_extract({column}, ?) = ?)")
            params += [path, path, want]
    return "(" + " AND ".join(parts) + ")", params


def thread_seen(
    dialect: Dialect, name: str | None, metadata: Mapping[str, str] | None
) -> tuple[str, tuple[Any, ...]]:
    """The condition for a row ``t`` of ``longtask_threads`` to be in a list: owned by
    ``name`` or reached by ``name``'s approval (``reached_by``); with ``metadata`` (an auth
    handler's ``simple_filter``) its API metadata matching it, or reached by ``name``'s
    approval."""
    if metadata is None:
        assert name is not None
        return seen_by(dialect, name)
    sql, params = _metadata_is(dialect, metadata, "m.metadata")
    sql = f"EXISTS (SELECT 1 FROM longtask_api_threads m WHERE m.thread_id = t.thread_id AND {sql})"
    if name is not None:
        named, given = reached_by(dialect, name)
        sql, params = f"({sql} OR {named})", [*params, *given]
    return sql, tuple(params)


class VisibleTables:
    """The Server API's thread lists, filtered and paged in the query."""

    _run: Any
    dialect: Dialect

    def _visible_where(
        self, name: str | None, ids: list[str] | None, metadata: Mapping[str, str] | None
    ) -> tuple[str, list[Any]]:
        conditions: list[str] = []
        params: list[Any] = []
        if metadata is not None:
            # an auth handler's filter, or a pending approval that names the caller
            sql, wanted = _metadata_is(self.dialect, metadata)
            if name is not None:
                named, given = reached_by(self.dialect, name, "v")
                sql, wanted = f"({sql} OR {named})", [*wanted, *given]
            conditions.append(sql)
            params.extend(wanted)
        elif name is not None:
            sql, given = seen_by(self.dialect, name, "v")
            conditions.append(sql)
            params.extend(given)
        if ids is not None:
            if not ids:
                conditions.append("1 = 0")
            else:
                conditions.append(f"v.thread_id IN ({', '.join('?' for _ in ids)})")
                params.extend(ids)
        return (f" WHERE {' AND '.join(conditions)}" if conditions else ""), params

    def answered(self, thread_id: str, name: str) -> bool:
        """Whether ``name`` answered an approval of the thread (a key lookup)."""
        rows = self._run(
            "SELECT 1 FROM longtask_answerers WHERE thread_id = ? AND name = ?", (thread_id, name)
        )
        return bool(rows)

    def visible_thread_ids(
        self,
        name: str | None,
        *,
        sort: str = "created_at",
        descending: bool = True,
        limit: int | None = None,
        offset: int = 0,
        ids: list[str] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The ids of the threads ``name`` sees (None: every thread; with ``metadata``, an
        auth handler's ``simple_filter``: those it matches or whose approval names
        ``name``), among ``ids`` if given, ordered by ``sort`` (``VISIBLE_ORDER``; ties by
        id), from ``offset``, at most ``limit`` (None: all)."""
        column = VISIBLE_ORDER[sort]
        way = "DESC" if descending else "ASC"
        where, params = self._visible_where(name, ids, metadata)
        order = f"{column} {way}"
        if column != "v.thread_id":
            order += f", v.thread_id {way}"  # ties in one order, page after page
        page = ""
        if limit is not None or offset:
            page = " LIMIT ? OFFSET ?"
            params += [limit if limit is not None else 2**62, offset]
        rows = self._run(
            f"SELECT v.thread_id FROM ({_ALL_THREADS}) v{where} ORDER BY {order}{page}", params
        )
        return [str(r[0]) for r in rows]

    def count_visible_threads(
        self,
        name: str | None,
        ids: list[str] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> int:
        """How many threads ``name`` sees (as ``visible_thread_ids``), among ``ids``."""
        where, params = self._visible_where(name, ids, metadata)
        rows = self._run(f"SELECT COUNT(*) FROM ({_ALL_THREADS}) v{where}", params)
        return int(rows[0][0])
