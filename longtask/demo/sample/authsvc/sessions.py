"""Server-side sessions: a random session id, kept in this process's memory."""

import secrets

_SESSIONS: dict[str, str] = {}


def create(user: str) -> str:
    sid = secrets.token_hex(16)
    _SESSIONS[sid] = user
    return sid


def lookup(sid: str) -> str | None:
    return _SESSIONS.get(sid)


def drop(sid: str) -> None:
    _SESSIONS.pop(sid, None)
