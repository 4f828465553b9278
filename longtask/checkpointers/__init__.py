"""Open a database from a URL (``Database.open``): longtask's LangGraph checkpoint saver,
the reader of checkpoints that needs no LangGraph, our ``store`` beside them and the
per-thread writer lock, over SQLite or PostgreSQL; and LangGraph's own long-term memory
store on the same database (``open_kv_store``). Beside ``steps``, above ``store``: it
imports only ``longtask.store``, ``longtask.errors`` and third-party libraries (LangGraph's
checkpoint base, psycopg, ormsgpack).
"""

from longtask.checkpointers._database import Database, set_opener
from longtask.checkpointers._kvstore import KvStore, open_kv_store
from longtask.checkpointers._open import open_database
from longtask.checkpointers._url import DEFAULT_URL, ENV_VAR, parse_url, redact, resolve_url

# Database.open hands the URL to the factory, which imports the backends; they subclass
# Database, so _database cannot import the factory: it is passed in here, once.
set_opener(open_database)

__all__ = [
    "DEFAULT_URL",
    "ENV_VAR",
    "Database",
    "KvStore",
    "open_kv_store",
    "parse_url",
    "redact",
    "resolve_url",
]
