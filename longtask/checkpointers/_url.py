"""Database URLs: defaults, parsing and redaction."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from longtask.errors import DatabaseError

DEFAULT_URL = "sqlite:///.longtask/longtask.db"
ENV_VAR = "LONGTASK_DB"


@dataclass(frozen=True)
class DatabaseURL:
    raw: str
    scheme: str  # "sqlite" or "postgresql"
    path: Path | None = None  # for sqlite

    @property
    def redacted(self) -> str:
        return redact(self.raw)


def resolve_url(url: str | None = None) -> str:
    """The URL to use: the argument, else ``$LONGTASK_DB``, else the embedded SQLite default."""
    return url or os.environ.get(ENV_VAR) or DEFAULT_URL


def parse_url(url: str) -> DatabaseURL:
    """Accepts ``sqlite:///relative.db``, ``sqlite:////abs.db``, a bare ``*.db`` path, and
    ``postgresql://...`` (``postgres://`` too)."""
    if url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        return DatabaseURL(raw="postgresql://" + url.split("://", 1)[1], scheme="postgresql")
    if url.startswith("sqlite:"):
        rest = url[len("sqlite:") :]
        if not rest.startswith("///"):
            raise DatabaseError(
                f"cannot read SQLite URL {_unparsed(url)!r}: write sqlite:///relative/path.db or "
                "sqlite:////absolute/path.db"
            )
        path = rest[3:]
        if not path or path == ":memory:":
            raise DatabaseError(
                "an in-memory SQLite database cannot hold a thread across processes; give a "
                "file path such as sqlite:///.longtask/longtask.db"
            )
        return DatabaseURL(raw=url, scheme="sqlite", path=Path(path))
    if "://" not in url and url.endswith((".db", ".sqlite", ".sqlite3")):
        return DatabaseURL(raw=f"sqlite:///{url}", scheme="sqlite", path=Path(url))
    raise DatabaseError(
        f"unsupported database URL {_unparsed(url)!r}: use sqlite:///path/to/file.db or "
        "postgresql://user@host:5432/dbname (set it with --db or $LONGTASK_DB)"
    )


_KV_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)
# scheme://user:PASSWORD@host... : everything up to the last "@" is the password, as libpq
# reads it, even when it holds "/", "#" or "?" (common in generated passwords).
_URL_PASSWORD = re.compile(r"^([A-Za-z][\w+.-]*://[^:/@]*:)(.*)@")


def _unparsed(url: str) -> str:
    """A URL that could not be parsed, shown without what may be credentials: redact()
    knows where a password sits only in a well-formed URL, so everything up to the last
    "@" is hidden (``postgresql:/u:PW@h/db`` shows as ``***@h/db``)."""
    url = redact(url)
    return "***@" + url.rsplit("@", 1)[1] if "@" in url else url


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (URL or key=value form)."""
    url = _KV_PASSWORD.sub(r"\1***", url)
    url = _URL_PASSWORD.sub(r"\1***@", url)
    return re.sub(r"([?&]password=)[^&]*", r"\1***", url, flags=re.IGNORECASE)


def _password(url: str) -> str | None:
    match = _URL_PASSWORD.match(url)
    if match and match.group(2):
        return match.group(2)
    kv = _KV_PASSWORD.search(url)
    return kv.group(2).strip("'") if kv else None


def scrub(text: str, url: str) -> str:
    """Remove the password of ``url`` from ``text`` (a driver error message, say)."""
    text = text.replace(url, redact(url))
    password = _password(url)
    if password:
        text = text.replace(password, "***")
    return text
