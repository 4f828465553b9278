"""The ``longtask`` command line (typer)."""

from longtask.cli import _demo, _travel, _workers  # noqa: F401  (they register commands on app)
from longtask.cli._app import app, main

__all__ = ["app", "main"]
