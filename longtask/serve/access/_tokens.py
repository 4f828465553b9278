"""Bearer tokens for ``longtask serve``: who a request's token names.

A token maps to the name of the person (or system) that holds it; that name is who approves,
rejects, signals or cancels. Tokens never appear in a message, a repr or a log line.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from starlette.requests import HTTPConnection

from longtask.errors import InvalidInput

ENV_TOKENS = "LONGTASK_API_TOKENS"
ENV_TOKEN = "LONGTASK_API_TOKEN"
ENV_USER = "LONGTASK_API_USER"
DEFAULT_USER = "api"
#: the query parameter that may carry a token for reads: EventSource cannot send headers
QUERY_TOKEN = "access_token"


#: the roles a built-in token may have (``NAME=TOKEN:ROLE``); ``user`` when none is given
ROLES = ("admin", "viewer", "user")


def _entries(environ: Mapping[str, str]) -> list[tuple[str, str, str | None]]:
    """``(name, token, role)`` of each ``NAME=TOKEN[:ROLE]`` entry of ``LONGTASK_API_TOKENS``
    and of ``LONGTASK_API_TOKEN=TOKEN[:ROLE]`` (named by ``LONGTASK_API_USER``)."""
    out: list[tuple[str, str, str | None]] = []
    raw = [(i, e) for i, e in enumerate(environ.get(ENV_TOKENS, "").split(","))]
    single = environ.get(ENV_TOKEN, "").strip()
    if single:
        raw.append((-1, f"{environ.get(ENV_USER, '').strip() or DEFAULT_USER}={single}"))
    for i, entry in raw:
        if not entry.strip():
            continue
        name, sep, token = entry.partition("=")
        role: str | None = None
        head, colon, tail = token.strip().rpartition(":")
        # A suffix that names a role is one; any other colon belongs to the token.
        if colon and tail in ROLES:
            token, role = head, tail
        if not sep or not name.strip() or not token.strip():
            # The entry's position, not its text: the text holds a token.
            where = f"{ENV_TOKENS}: entry {i + 1}" if i >= 0 else ENV_TOKEN
            raise InvalidInput(
                f"{where} is not NAME=TOKEN[:ROLE] "
                '(expected e.g. LONGTASK_API_TOKENS="alice=tok1:admin,bob=tok2")'
            )
        out.append((name.strip(), token.strip(), role))
    return out


def tokens_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``{token: name}`` from ``LONGTASK_API_TOKENS="alice=tok1:admin,bob=tok2"`` and/or
    ``LONGTASK_API_TOKEN=tok`` (named by ``LONGTASK_API_USER``, default ``api``)."""
    pairs = [(name, token) for name, token, _role in _entries(environ)]
    return check_tokens({token: name for name, token in _unique(pairs)})


def roles_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``{name: role}`` of the tokens in the environment that give a role."""
    out: dict[str, str] = {}
    for name, _token, role in _entries(environ):
        if role is not None:
            if out.get(name, role) != role:
                raise InvalidInput(f"{name!r} is given two roles: {out[name]!r} and {role!r}")
            out[name] = role
    return out


def check_roles(roles: Mapping[str, str]) -> dict[str, str]:
    """``roles`` (``{name: role}``) if each role is one of ``ROLES``."""
    bad = {n: r for n, r in roles.items() if r not in ROLES}
    if bad:
        raise InvalidInput(
            f"unknown role(s): {', '.join(f'{n}={r!r}' for n, r in bad.items())}; "
            f"a role is one of {', '.join(ROLES)}"
        )
    return dict(roles)


def _unique(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for name, token in pairs:
        if seen.get(token, name) != name:
            # One token for two names would make `by` depend on the order of the entries.
            raise InvalidInput(f"the same API token is given to {seen[token]!r} and {name!r}")
        seen[token] = name
    return pairs


def check_tokens(tokens: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for token, name in tokens.items():
        if not isinstance(token, str) or not token or not token.isprintable():
            raise InvalidInput(f"the API token of {name!r} is empty or not printable text")
        if not isinstance(name, str) or not name.strip():
            raise InvalidInput("an API token has an empty name")
        out[token] = name.strip()
    return out


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Tokens:
    """Resolves a request's bearer token to the name it was configured with."""

    def __init__(self, tokens: Mapping[str, str], hashed: Mapping[str, str] | None = None) -> None:
        """``tokens``: ``{token: name}``; ``hashed``: ``{hex sha256 of a token: name}`` (a
        tokens file's). Only the hashes are kept: a request's token is hashed and compared."""
        self._tokens = [(_digest(t), n) for t, n in check_tokens(tokens).items()]
        self._tokens += [(bytes.fromhex(h), n) for h, n in (hashed or {}).items()]

    def __repr__(self) -> str:
        return f"Tokens({len(self._tokens)} configured)"

    def names(self) -> list[str]:
        """The names the tokens give, in the order configured (repeated for each token)."""
        return [name for _digest, name in self._tokens]

    def add(self, token: str, name: str) -> None:
        """Accept one more token, for ``name``."""
        self._tokens += [(_digest(t), n) for t, n in check_tokens({token: name}).items()]

    def __bool__(self) -> bool:
        return bool(self._tokens)

    def name_for(self, token: str | None) -> str | None:
        if not token:
            return None
        given = _digest(token)
        found = None
        # Every token is compared, so the time taken does not tell which one came close.
        for known, name in self._tokens:
            if hmac.compare_digest(given, known):
                found = name
        return found

    def from_request(self, conn: HTTPConnection, *, query: bool = False) -> str | None:
        """The name of the request's token: ``Authorization: Bearer``, ``X-Api-Key`` (the
        LangGraph SDK's ``api_key``), or (when ``query``) the ``access_token`` query
        parameter."""
        if "authorization" in conn.headers:
            # Given, it alone decides: a wrong one is not rescued by another header.
            scheme, _, value = conn.headers["authorization"].partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                return self.name_for(value.strip())
            return None
        # The LangGraph SDK sends its api_key (or $LANGGRAPH_API_KEY) as X-Api-Key.
        key = conn.headers.get("x-api-key", "").strip()
        if key:
            return self.name_for(key)
        if query:
            return self.name_for(conn.query_params.get(QUERY_TOKEN))
        return None
