"""The ``longtask`` command line (typer)."""

# isort: off
# Each module registers its commands on app; --help lists them in this order.
from longtask.cli import _pauses, _control, _costs, _demo, _travel, _move  # noqa: F401
from longtask.cli import _workers, _prune, _schedules, _versions  # noqa: F401
from longtask.cli import _migrate  # noqa: F401

# isort: on
from longtask.cli._app import app, main

__all__ = ["app", "main"]
