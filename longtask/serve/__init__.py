"""``longtask serve``: a small HTTP API, the LangGraph Server API, a Server-Sent Events
stream and a web page over one database's threads. It may import the root package
``longtask``, ops, runtime and the rooms under runtime, never demo or cli; its modules
import one another directly, never through this ``__init__``, which is for outside callers.

Imports Starlette; the CLI imports this package only when ``serve`` runs.
"""

from longtask.serve._app import create_app
from longtask.serve._hosts import is_loopback
from longtask.serve._server import run_server
from longtask.serve.access import tokens_from_env

__all__ = ["create_app", "is_loopback", "run_server", "tokens_from_env"]
