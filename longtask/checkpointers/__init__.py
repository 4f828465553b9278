"""Open LangGraph savers (and our tables beside them) from a URL."""

from longtask.checkpointers._database import Database
from longtask.checkpointers._url import DEFAULT_URL, ENV_VAR, parse_url, redact, resolve_url

__all__ = ["DEFAULT_URL", "ENV_VAR", "Database", "parse_url", "redact", "resolve_url"]
