"""The ``longtask`` command line (typer)."""

from longtask.cli._app import app, main

__all__ = ["app", "main"]
