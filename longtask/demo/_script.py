"""What the offline model answers each agent of the migration, turn by turn: the tool calls
that make the real edits, and the texts. (The agents' prompts name them ``(agent: NAME)``.)

The first version of ``tokens.verify`` forgets to check the signature, so the project's test
of tampered credentials fails and the fix loop has something to fix.
"""

from __future__ import annotations

from typing import Any

_TOKENS_HEAD = '''"""JSON Web Tokens (HS256) with the standard library: issue and verify."""

import base64
import hashlib
import hmac
import json
import time

SECRET = b"authsvc-demo-secret-change-me"
TTL = 3600


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(header: str, payload: str) -> str:
    return _b64(hmac.new(SECRET, f"{header}.{payload}".encode(), hashlib.sha256).digest())


def issue(user: str, now: float | None = None) -> str:
    """A signed token for ``user``, valid for TTL seconds."""
    now = time.time() if now is None else now
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64(json.dumps({"sub": user, "exp": int(now) + TTL}).encode())
    return f"{header}.{payload}.{_sign(header, payload)}"


def verify(token: str, now: float | None = None) -> str | None:
    """The user of a valid, unexpired token; None otherwise."""
    try:
        header, payload, signature = token.split(".")
        claims = json.loads(_unb64(payload))
    except ValueError:
        return None
'''

TOKENS_BUGGY = (
    _TOKENS_HEAD
    + """    now = time.time() if now is None else now
    if claims.get("exp", 0) < now:
        return None
    return claims.get("sub")
"""
)

TOKENS_FIXED = (
    _TOKENS_HEAD
    + """    if not hmac.compare_digest(signature, _sign(header, payload)):
        return None
    now = time.time() if now is None else now
    if claims.get("exp", 0) < now:
        return None
    return claims.get("sub")
"""
)

AUTH = '''"""Authentication: check passwords, hand out signed tokens (JWT), read them back."""

from authsvc import tokens

USERS = {"alice": "wonderland", "bob": "builder"}


def login(user: str, password: str) -> dict[str, str] | None:
    """The headers a client sends from now on, or None for a wrong password."""
    if USERS.get(user) != password:
        return None
    return {"Authorization": f"Bearer {tokens.issue(user)}"}


def current_user(headers: dict[str, str]) -> str | None:
    value = headers.get("Authorization", "")
    if not value.startswith("Bearer "):
        return None
    return tokens.verify(value[len("Bearer "):])
'''

API = '''"""The HTTP layer, without the HTTP: a path and headers in, a status and a body out."""

from authsvc import auth


def handle(path: str, headers: dict[str, str]) -> tuple[int, str]:
    if path == "/health":
        return 200, "ok"  # no credentials: load balancers probe it
    user = auth.current_user(headers)
    if user is None:
        return 401, "unauthorized"
    if path == "/me":
        return 200, user
    return 404, "not found"
'''

TEST_TOKENS = """from authsvc import api, tokens


def test_round_trip() -> None:
    assert tokens.verify(tokens.issue("alice")) == "alice"


def test_expired() -> None:
    assert tokens.verify(tokens.issue("alice", now=0)) is None


def test_health_needs_no_credentials() -> None:
    assert api.handle("/health", {}) == (200, "ok")
"""

MIGRATION = """# Migration: sessions to JWT

authsvc no longer keeps sessions in memory. `auth.login` returns an
`Authorization: Bearer <token>` header: a JSON Web Token (HS256) signed with
`tokens.SECRET`, valid for one hour (`tokens.TTL`).

## What changed

- `authsvc/tokens.py` (new): `issue(user)` and `verify(token)`; the signature is checked
  with `hmac.compare_digest`, expired tokens are refused.
- `authsvc/auth.py`: logs in with tokens instead of sessions.
- `authsvc/sessions.py`: removed.
- `authsvc/api.py`: `/health` answers without credentials.
- `tests/test_tokens.py` (new): round trip, expiry, health.

## Rolling it out

1. Set a real secret in `tokens.SECRET` (from the environment) before deploying.
2. Clients replace the `Cookie: sid=...` header with the `Authorization` header that
   `login` returns; old session cookies are no longer accepted.
"""

PLAN = """Plan: move authsvc from sessions to JWT

1. Add authsvc/tokens.py: issue(user) and verify(token) for HS256 tokens with an expiry.
2. auth.login returns an Authorization: Bearer header; auth.current_user verifies it.
3. Remove authsvc/sessions.py (nothing else uses it).
4. api.handle: keep /me; add /health without credentials.
5. Tests: keep tests/test_api.py passing; add tests/test_tokens.py.
6. Document the change in MIGRATION.md."""

#: agent -> replies by turn: text, or [(tool, args), ...]
SCRIPT: dict[str, list[Any]] = {
    "analysis": [
        [("list_files", {})],
        [("read_file", {"path": "authsvc/auth.py"})],
        [("read_file", {"path": "authsvc/sessions.py"})],
        "Sessions live in authsvc/sessions.py (in memory). auth.login creates one and "
        "returns a Cookie header; auth.current_user looks the cookie up; api.handle uses "
        "auth.current_user. tests/test_api.py covers login, /me, wrong password, missing "
        "and tampered credentials.",
    ],
    "design": [PLAN],
    "backend": [
        [("write_file", {"path": "authsvc/tokens.py", "content": TOKENS_BUGGY})],
        [("write_file", {"path": "authsvc/auth.py", "content": AUTH})],
        [("delete_file", {"path": "authsvc/sessions.py"})],
        [("write_file", {"path": "tests/test_tokens.py", "content": TEST_TOKENS})],
        "tokens.py added, auth.py moved to bearer tokens, sessions.py removed, tests added.",
    ],
    "api": [
        [("read_file", {"path": "authsvc/api.py"})],
        [("write_file", {"path": "authsvc/api.py", "content": API})],
        "api.handle answers /health without credentials; /me unchanged.",
    ],
    "fix_tests": [
        [("read_file", {"path": "authsvc/tokens.py"})],
        [("write_file", {"path": "authsvc/tokens.py", "content": TOKENS_FIXED})],
        "tokens.verify now checks the signature with hmac.compare_digest.",
    ],
    "docs": [
        [("write_file", {"path": "MIGRATION.md", "content": MIGRATION})],
        "MIGRATION.md written.",
    ],
}
