"""The ``longtask`` command line (typer)."""

from longtask.cli import _travel  # noqa: F401  (registers its commands on app)
from longtask.cli._app import app, main

__all__ = ["app", "main"]
