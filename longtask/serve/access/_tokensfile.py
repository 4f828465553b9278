"""A file of ``serve``'s users: their names, roles, and the SHA-256 of their tokens.

``--tokens-file PATH`` (or ``$LONGTASK_API_TOKENS_FILE``) names it. It holds no secret: a
token is checked by hashing what a request sends and comparing hashes, so the file can be
committed, or mounted from a config map, and a token is never written down by longtask.
One user a line, ``#`` starts a comment::

    # NAME   ROLE    SHA-256 OF THE TOKEN
    alice    user    sha256:3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7
    ops      admin   sha256:...

The role may be left out (``alice sha256:...``: a ``user``). A name may have several
lines (a token being rotated) but one role. The file's users add to those of
``$LONGTASK_API_TOKENS``; a name both give must have the same role in both.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from longtask.errors import InvalidInput
from longtask.serve.access._tokens import ROLES

ENV_TOKENS_FILE = "LONGTASK_API_TOKENS_FILE"
PREFIX = "sha256:"
_HEX = re.compile(r"[0-9a-f]{64}")
#: how to make a line, said by every error about one (a pasteable command that reads the
#: token without echoing it or keeping it in the shell's history)
HOW = (
    "each line is NAME [ROLE] sha256:HEX; make the hash with: "
    "python3 -c 'import getpass, hashlib; "
    'print("sha256:" + hashlib.sha256(getpass.getpass("token: ").encode()).hexdigest())\''
)


def token_hash(token: str) -> str:
    """The hex SHA-256 of a token, as the file holds it (without ``sha256:``)."""
    return hashlib.sha256(token.encode()).hexdigest()


def read_tokens_file(path: str) -> tuple[dict[str, str], dict[str, str]]:
    """``({hex sha256: name}, {name: role})`` of the file at ``path``. A line that is not
    ``NAME [ROLE] sha256:HEX`` is refused with its number and what to write instead; the
    error never repeats a field that could be a token."""
    where = Path(path)
    try:
        text = where.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(
            f"tokens file {path!r} does not exist: give the path of a file of users "
            f"(--tokens-file or {ENV_TOKENS_FILE}); {HOW}"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"tokens file {path!r} cannot be read: {exc}") from None
    hashes: dict[str, str] = {}
    roles: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        at = f"tokens file {path!r}, line {number}"
        fields = line.split()
        if len(fields) not in (2, 3):
            raise InvalidInput(f"{at} has {len(fields)} fields, not 2 or 3; {HOW}")
        name, secret = fields[0], fields[-1]
        role = fields[1] if len(fields) == 3 else "user"
        if not name.isprintable() or name.startswith(PREFIX):
            raise InvalidInput(f"{at}: the first field is the user's name; {HOW}")
        if role not in ROLES:
            # A role is no secret, but a field in its place could be: it is not repeated.
            raise InvalidInput(f"{at}: the role of {name!r} is not one of {', '.join(ROLES)}")
        digest = secret[len(PREFIX) :].lower() if secret.startswith(PREFIX) else ""
        if not _HEX.fullmatch(digest):
            raise InvalidInput(
                f"{at}: the last field of {name!r} is not sha256: and 64 hex digits (the "
                f"file holds a token's hash, never the token itself); {HOW}"
            )
        if hashes.get(digest, name) != name:
            raise InvalidInput(
                f"{at}: the token of {name!r} is also {hashes[digest]!r}'s; give each "
                "person a token of their own"
            )
        if roles.get(name, role) != role:
            raise InvalidInput(
                f"{at}: {name!r} is given the role {role!r}, and {roles[name]!r} on an "
                "earlier line; a name has one role"
            )
        hashes[digest] = name
        roles[name] = role
    if not hashes:
        raise InvalidInput(f"tokens file {path!r} names no user; {HOW}")
    return hashes, roles


def combine(
    env_tokens: dict[str, str],
    env_roles: dict[str, str],
    file_hashes: dict[str, str],
    file_roles: dict[str, str],
    path: str,
) -> dict[str, str]:
    """The roles of the environment's users and the file's together (the tokens of both
    are accepted); a name both give a role must be given the same one, and a token both
    give must name the same person."""
    for token, name in env_tokens.items():
        other = file_hashes.get(token_hash(token))
        if other is not None and other != name:
            raise InvalidInput(
                f"the API token of {name!r} in the environment is {other!r}'s in tokens "
                f"file {path!r}: one token names one person"
            )
    roles = dict(file_roles)
    for name, role in env_roles.items():
        if roles.get(name, role) != role:
            raise InvalidInput(
                f"{name!r} is {role!r} in the environment and {roles[name]!r} in tokens "
                f"file {path!r}: give one role"
            )
        roles[name] = role
    # A name the environment gives no role keeps the file's (a token of its own, same person).
    return roles
