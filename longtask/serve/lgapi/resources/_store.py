"""The LangGraph Server API's store: items by namespace and key, search and namespaces,
with TTL, on LangGraph's own ``SqliteStore``/``PostgresStore`` in the thread database
(``checkpointers._kvstore``), answered as LangGraph's server answers them.

The store is opened on the first request that needs it (its tables are made then) and
closed with the app. Reads need what any read needs; writes need a token, and a viewer
only reads. With built-in tokens a user reads and writes the namespaces under their own
name (``["alice", ...]``; ``_own``), an admin every one. With LangGraph's auth handlers
(langgraph.json ``auth``), a user's request calls the ``store`` handler for its action
with the same value LangGraph's server gives it (``namespace``, ``key``, ...): a handler
may refuse, rewrite the namespace (keeping each user in their own) or, for a search,
return a filter that is added to the request's; without a store handler, as on
LangGraph's server, nothing is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from longtask.serve.access import about, caller_of
from longtask.serve.lgapi._body import integer_field

if TYPE_CHECKING:
    from longtask.serve.lgapi._common import Api


def _namespace(value: Any, name: str, *, optional: bool = False) -> tuple[str, ...] | None:
    """A namespace: a list of non-empty labels without periods (a 422 naming what is not)."""
    if value is None and optional:
        return None
    if not isinstance(value, (list, tuple)):
        raise HTTPException(422, f"{name} must be a list of labels, not {value!r}")
    for label in value:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise HTTPException(
                422, f"namespace label {label!r} must be a non-empty string without periods"
            )
    return tuple(value)


def _key(value: Any) -> str:
    if not isinstance(value, str) or not value or "\x00" in value:
        raise HTTPException(422, f"key must be a non-empty string, not {value!r}")
    return value


#: the longest ttl taken: a hundred years, in minutes (a longer one overflows the clock)
MAX_TTL = 100 * 366 * 24 * 60
#: the shortest: 60 ms. LangGraph's PostgresStore writes the ttl into an interval as text,
#: and a float that small prints with an exponent, which PostgreSQL cannot read (a 500).
MIN_TTL = 0.001


def _ttl(value: Any) -> float | None:
    """Minutes an item lives after its last write (or read), or None: for ever."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not MIN_TTL <= value <= MAX_TTL
    ):
        raise HTTPException(
            422,
            f"ttl is a number of minutes from {MIN_TTL} to {MAX_TTL} (or null), not {value!r}",
        )
    return float(value)


async def _stored(api: Api, fn: Any) -> Any:
    """``fn`` run on the store; what the store refuses of a value (a filter it cannot apply,
    text it cannot encode) is a 422 naming it, not a server error."""
    try:
        return await api.call(fn)
    except (ValueError, TypeError, OverflowError) as exc:
        raise HTTPException(
            422, f"the store cannot take this: {type(exc).__name__}: {exc}"
        ) from None


async def _authorized(
    api: Api, request: Request, action: str, value: dict[str, Any]
) -> dict[str, Any] | None:
    """``value`` as the store's auth handler left it (None: no handler decides), and the
    filter it returned for a search; HTTPException with its status if it refuses. With
    built-in tokens, a user keeps to their own namespaces (``_own``)."""
    found = await api.access.ask(request, "store", action, value)
    # The handler may have rewritten the namespace: it must still be one.
    for key in ("namespace", "suffix"):
        if value.get(key) is not None:
            value[key] = _namespace(list(value[key]), key)
    caller = caller_of(request)
    if api.access.handlers is None and caller.role == "user":
        assert caller.name is not None, "a user without a name"
        _own(caller.name, action, value)
    return found


def _own(name: str, action: str, value: dict[str, Any]) -> None:
    """A user's namespaces, with built-in tokens: those whose first label is their name
    (``["alice", "notes"]``), as LangGraph's docs key a user's memories. An item elsewhere
    is refused (403); a search or a list of namespaces without a prefix is confined to
    theirs, with another's prefix refused. Admins read and write every namespace, viewers
    read every one; the server's own writes do not pass through here."""
    namespace = value.get("namespace")
    if not namespace and action in ("search", "list_namespaces"):
        if "." in name:
            raise HTTPException(403, _no_label(name))
        value["namespace"] = (name,)
        return
    if namespace and namespace[0] == name:
        return
    if "." in name:
        raise HTTPException(403, _no_label(name))
    where = ".".join(namespace) if namespace else "the root"
    raise HTTPException(
        403,
        f"{name!r} may use the store's namespaces under their own name ([{name!r}, ...]), "
        f"not {where!r}: begin the namespace with {name!r} (an admin uses every namespace)",
    )


def _no_label(name: str) -> str:
    return (
        f"{name!r} holds a period, which no namespace label may: this user has no namespace "
        "of their own; give them a name without a period"
    )


def _item(item: Any) -> dict[str, Any]:
    """An item as LangGraph's server shows it; times with their zone (SQLite's store gives
    them without one, in UTC)."""
    out: dict[str, Any] = item.dict()
    for key in ("created_at", "updated_at"):
        when = out.get(key)
        if isinstance(when, str) and "+" not in when[10:] and not when.endswith("Z"):
            out[key] = when + "+00:00"
    return out


class StoreRoutes:
    """The store's routes over one lazily opened LangGraph store."""

    def __init__(self, api: Api) -> None:
        self.api = api

    def store(self) -> Any:
        # the graphs' own (one per database: what a graph writes, these routes read)
        return self.api.runner.db.graph_store.opened()

    def close(self) -> None:
        self.api.runner.db.graph_store.close()

    async def put(self, request: Request, actor: str) -> Response:
        body = await self.api.json_body(request)
        namespace = _namespace(body.get("namespace"), "namespace")
        key = _key(body.get("key"))
        value = body.get("value")
        if not isinstance(value, dict):
            raise HTTPException(422, f"value must be an object, not {value!r}")
        index = body.get("index")
        if index not in (None, False) and not (
            isinstance(index, list) and all(isinstance(f, str) for f in index)
        ):
            raise HTTPException(422, "index is false, null or a list of field paths")
        ttl = _ttl(body.get("ttl"))
        asked: dict[str, Any] = {
            "namespace": namespace,
            "key": key,
            "value": value,
            "index": index,
            "ttl": ttl,
        }
        await _authorized(self.api, request, "put", asked)
        namespace = asked["namespace"]

        def put() -> None:
            self.store().put(namespace, key, value, index=index, ttl=ttl)

        await _stored(self.api, put)
        return Response(status_code=204)

    async def get(self, request: Request) -> Response:
        q = request.query_params
        raw = q.get("namespace", "")
        namespace = _namespace(raw.split(".") if raw else [], "namespace")
        key = q.get("key")
        if not key:
            raise HTTPException(400, "Key is required")
        refresh = q.get("refresh_ttl")
        refresh_ttl = refresh.lower() == "true" if refresh is not None else None
        asked: dict[str, Any] = {
            "namespace": namespace,
            "key": _key(key),
            "refresh_ttl": refresh_ttl,
        }
        await _authorized(self.api, request, "get", asked)
        namespace = asked["namespace"]

        def get() -> Any:
            return self.store().get(namespace, _key(key), refresh_ttl=refresh_ttl)

        item = await _stored(self.api, get)
        return JSONResponse(_item(item) if item is not None else None)

    async def delete(self, request: Request, actor: str) -> Response:
        body = await self.api.json_body(request)
        namespace = _namespace(body.get("namespace") or [], "namespace")
        key = _key(body.get("key"))
        asked: dict[str, Any] = {"namespace": namespace, "key": key}
        await _authorized(self.api, request, "delete", asked)
        namespace = asked["namespace"]
        await _stored(self.api, lambda: self.store().delete(namespace, key))
        return Response(status_code=204)

    async def search(self, request: Request) -> Response:
        body = await self.api.json_body(request)
        prefix = _namespace(body.get("namespace_prefix") or [], "namespace_prefix")
        assert prefix is not None
        where = body.get("filter")
        if where is not None and not isinstance(where, dict):
            raise HTTPException(422, f"filter must be an object, not {where!r}")
        query = body.get("query")
        if query is not None and not isinstance(query, str):
            raise HTTPException(422, f"query must be a string, not {query!r}")
        limit = integer_field(body, "limit", 10, 1, 1000)
        offset = integer_field(body, "offset", 0, 0, 10**9)
        refresh_ttl = body.get("refresh_ttl")
        asked: dict[str, Any] = {
            "namespace": prefix,
            "filter": where,
            "limit": limit,
            "offset": offset,
            "query": query,
            "refresh_ttl": refresh_ttl,
        }
        added = await _authorized(self.api, request, "search", asked)
        prefix = asked["namespace"]
        if added:
            given: dict[str, Any] = dict(where or {})
            clash = {k for k in added if k in given and given[k] != added[k]}
            if clash:
                raise HTTPException(403, f"the filter on {sorted(clash)} is not yours to set")
            where = {**given, **added}

        def search() -> list[dict[str, Any]]:
            found = self.store().search(
                prefix,
                query=query,
                filter=where,
                limit=limit,
                offset=offset,
                refresh_ttl=refresh_ttl if isinstance(refresh_ttl, bool) else None,
            )
            return [_item(item) for item in found]

        return JSONResponse({"items": await _stored(self.api, search)})

    async def namespaces(self, request: Request) -> Response:
        body = await self.api.json_body(request)
        prefix = _namespace(body.get("prefix") or None, "prefix", optional=True)
        suffix = _namespace(body.get("suffix") or None, "suffix", optional=True)
        depth = body.get("max_depth")
        if depth is not None and (
            isinstance(depth, bool) or not isinstance(depth, int) or depth < 1
        ):
            raise HTTPException(422, f"max_depth is a whole number from 1, not {depth!r}")
        limit = integer_field(body, "limit", 100, 1, 1000)
        offset = integer_field(body, "offset", 0, 0, 10**9)
        asked: dict[str, Any] = {
            "namespace": prefix,
            "suffix": suffix,
            "max_depth": depth,
            "limit": limit,
            "offset": offset,
        }
        await _authorized(self.api, request, "list_namespaces", asked)
        prefix, suffix = asked["namespace"], asked["suffix"]

        def listed() -> list[list[str]]:
            found = self.store().list_namespaces(
                prefix=prefix, suffix=suffix, max_depth=depth, limit=limit, offset=offset
            )
            return [list(ns) for ns in found]

        return JSONResponse({"namespaces": await _stored(self.api, listed)})

    def routes(self) -> list[Route]:
        api = self.api
        return [
            Route("/store/items", about("store", api.actor(self.put)), methods=["PUT"]),
            Route("/store/items", about("store", api.reader(self.get)), methods=["GET"]),
            Route("/store/items", about("store", api.actor(self.delete)), methods=["DELETE"]),
            Route("/store/items/search", about("store", api.reader(self.search)), methods=["POST"]),
            Route(
                "/store/namespaces", about("store", api.reader(self.namespaces)), methods=["POST"]
            ),
        ]
