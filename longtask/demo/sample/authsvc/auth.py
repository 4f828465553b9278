"""Authentication: check passwords, hand out credentials, read them back."""

from authsvc import sessions

USERS = {"alice": "wonderland", "bob": "builder"}


def login(user: str, password: str) -> dict[str, str] | None:
    """The headers a client sends from now on, or None for a wrong password."""
    if USERS.get(user) != password:
        return None
    return {"Cookie": f"sid={sessions.create(user)}"}


def current_user(headers: dict[str, str]) -> str | None:
    cookie = headers.get("Cookie", "")
    if not cookie.startswith("sid="):
        return None
    return sessions.lookup(cookie[4:])
