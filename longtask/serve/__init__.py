"""``longtask serve``: a small HTTP API, a Server-Sent Events stream and a web page.

Imports Starlette; the CLI imports this package only when ``serve`` runs.
"""

from longtask.serve._app import create_app
from longtask.serve._auth import is_loopback, tokens_from_env
from longtask.serve._server import run_server

__all__ = ["create_app", "is_loopback", "run_server", "tokens_from_env"]
