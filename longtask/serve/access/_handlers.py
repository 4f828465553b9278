"""LangGraph's auth handlers (``langgraph_sdk.Auth``) in ``longtask serve``.

A langgraph.json (or longtask.json) ``{"auth": {"path": "auth.py:auth"}}`` names an
``Auth`` object. Its ``@auth.authenticate`` identifies the caller of every route but the
health checks, called with the parameters it names (request, headers, authorization, path,
method, query_params, path_params, scopes, scope), as LangGraph's server calls it. Its
``@auth.on...`` handlers are looked up as LangGraph's server looks them up (resource and
action, resource, action, then global) and called with ``ctx`` and ``value``; what they
return means what it means there: None or True lets the request through, False refuses it
(403), a dict is a filter on the thread's metadata (``{"owner": "alice"}``, ``$eq``,
``$contains``, ``$or``, ``$and``) that a thread must match to exist for the caller (404).
Edits a handler makes to ``value["metadata"]`` of a thread's creation are stored.
``Auth.exceptions.HTTPException`` keeps its status code.

``langgraph_sdk`` is imported only when a handler file is configured (the file imports it).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request

from longtask.errors import InvalidInput


class HandlerRefused(Exception):
    """A handler's answer that refuses the request: its status code and detail."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class HandlerUser:
    """The user ``authenticate`` returned, as handlers see it (``ctx.user.identity``,
    ``ctx.user["identity"]``, its other fields)."""

    def __init__(self, fields: Mapping[str, Any]) -> None:
        self._fields = dict(fields)

    @property
    def identity(self) -> str:
        return str(self._fields["identity"])

    @property
    def is_authenticated(self) -> bool:
        return bool(self._fields.get("is_authenticated", True))

    @property
    def display_name(self) -> str:
        return str(self._fields.get("display_name") or self.identity)

    @property
    def permissions(self) -> list[str]:
        return list(self._fields.get("permissions") or [])

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __contains__(self, key: str) -> bool:
        return key in self._fields

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_fields"][name]
        except KeyError:
            raise AttributeError(name) from None

    def get(self, key: str, default: Any = None) -> Any:
        return self._fields.get(key, default)

    def dict(self) -> dict[str, Any]:
        return dict(self._fields)


def load_auth(path: str, base: Path) -> Any:
    """The ``Auth`` object ``path`` (``file.py:name``, relative to ``base``, or
    ``module:name``) names."""
    module_name, sep, attr = path.rpartition(":")
    if not sep or not module_name or not attr:
        raise InvalidInput(
            f"auth path {path!r} is not FILE.py:NAME or MODULE:NAME "
            '(expected e.g. {"auth": {"path": "./auth.py:auth"}})'
        )
    try:
        from langgraph_sdk import Auth
    except ImportError as exc:
        raise InvalidInput(
            "an auth handler needs langgraph-sdk: pip install langgraph-sdk"
        ) from exc
    from longtask.runtime._taskref import load_module

    try:
        module = load_module(module_name, base)
    except Exception as exc:
        raise InvalidInput(f"cannot load the auth handler {path!r}: {exc}") from exc
    found = getattr(module, attr, None)
    if not isinstance(found, Auth):
        raise InvalidInput(
            f"{path!r} is {type(found).__name__}, not a langgraph_sdk.Auth: give the name of "
            "the Auth() object whose handlers to use"
        )
    return found


class Handlers:
    """Calls an ``Auth`` object's handlers the way LangGraph's server does."""

    def __init__(self, auth: Any) -> None:
        self.auth = auth
        fn = auth._authenticate_handler
        self._authenticate = fn
        self._params = set(inspect.signature(fn).parameters) if fn is not None else set()

    async def authenticate(self, request: Request) -> tuple[str, HandlerUser, list[str]]:
        """(identity, user, permissions) of the request's caller, or HandlerRefused."""
        if self._authenticate is None:
            raise HandlerRefused(401, "the auth handler has no @auth.authenticate")
        scope = request.scope
        given: dict[str, Any] = {}
        headers = dict(scope.get("headers", []))
        offered: dict[str, Any] = {
            "request": lambda: request,
            "scope": lambda: scope,
            "path": lambda: scope["path"],
            "method": lambda: scope["method"],
            "scopes": lambda: [],
            "path_params": lambda: scope.get("path_params", {}),
            "query_params": lambda: QueryParams(scope.get("query_string", b"")),
            "headers": lambda: headers,
            "authorization": lambda: _text(headers.get(b"authorization")),
        }
        for name in self._params:
            if name in offered:
                given[name] = offered[name]()
        try:
            result = self._authenticate(**given)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            raise _refusal(exc) from exc
        user, permissions = _user_of(result)
        return user.identity, user, permissions

    async def on(
        self,
        user: HandlerUser,
        permissions: list[str],
        resource: str,
        action: str,
        value: dict[str, Any],
    ) -> dict[str, Any] | None:
        """The filter the handler for ``resource``/``action`` returns (None: no filter),
        or HandlerRefused."""
        from langgraph_sdk.auth.types import AuthContext

        handler = self._handler(resource, action)
        if handler is None:
            return None
        ctx = AuthContext(
            user=user,
            permissions=permissions,
            resource=resource,  # type: ignore[arg-type]
            action=action,  # type: ignore[arg-type]
        )
        try:
            result = await handler(ctx=ctx, value=value)
        except AssertionError as exc:
            raise HandlerRefused(403, str(exc) or "Forbidden") from exc
        except Exception as exc:
            raise _refusal(exc) from exc
        if result is None or result is True:
            return None
        if result is False:
            raise HandlerRefused(403, "Forbidden")
        if not isinstance(result, dict):
            raise HandlerRefused(
                500, f"the auth handler returned {type(result).__name__}, not a filter dict"
            )
        return result

    def _handler(self, resource: str, action: str) -> Any:
        handlers = self.auth._handlers
        for key in ((resource, action), (resource, "*"), ("*", action), ("*", "*")):
            if key in handlers:
                return handlers[key][-1]
        return self.auth._global_handlers[-1] if self.auth._global_handlers else None


def _text(raw: bytes | None) -> str | None:
    return raw.decode("latin-1") if raw is not None else None


def _refusal(exc: Exception) -> HandlerRefused:
    from langgraph_sdk import Auth

    if isinstance(exc, Auth.exceptions.HTTPException):
        return HandlerRefused(exc.status_code, str(exc.detail))
    # A handler that fails is no answer: the caller is not let in.
    return HandlerRefused(500, f"the auth handler failed: {type(exc).__name__}")


def _user_of(result: Any) -> tuple[HandlerUser, list[str]]:
    """The user and permissions of what ``authenticate`` returned: a string (the
    identity), a dict with ``identity`` (and ``permissions``), an object with
    ``identity``, or a (permissions, user) pair."""
    permissions: list[str] = []
    if isinstance(result, tuple) and len(result) == 2:
        permissions, result = list(result[0] or []), result[1]
    if isinstance(result, str):
        fields: dict[str, Any] = {"identity": result}
    elif isinstance(result, Mapping) and "identity" in result:
        fields = dict(result)
        permissions = permissions or list(fields.get("permissions") or [])
    elif hasattr(result, "identity"):
        fields = {"identity": result.identity}
        for key in ("display_name", "is_authenticated", "permissions"):
            if hasattr(result, key):
                fields[key] = getattr(result, key)
        permissions = permissions or list(fields.get("permissions") or [])
    else:
        raise HandlerRefused(500, "@auth.authenticate returned no identity")
    return HandlerUser(fields), permissions


def matches(metadata: Mapping[str, Any], filters: Mapping[str, Any] | None) -> bool:
    """Whether ``metadata`` matches a handler's filter, as LangGraph's server matches it."""
    if not filters:
        return True
    for key, want in filters.items():
        if key == "$or":
            if not any(matches(metadata, group) for group in want):
                return False
            continue
        if key == "$and":
            if not all(matches(metadata, group) for group in want):
                return False
            continue
        if isinstance(want, dict):
            op, operand = next(iter(want.items()))
            if key not in metadata:
                return False
            if op == "$eq" and metadata[key] != operand:
                return False
            if op == "$contains":
                have = metadata[key]
                if not isinstance(have, list):
                    return False
                items = operand if isinstance(operand, list) else [operand]
                if any(item not in have for item in items):
                    return False
        elif key not in metadata or metadata[key] != want:
            return False
    return True
