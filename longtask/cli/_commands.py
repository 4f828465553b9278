"""Every command of the CLI, registered on ``app`` in the order ``--help`` lists them; or,
for a command line that names one, only the module that defines it.

Typer builds what it needs from the modules imported, so a command's own module is all a
run of it imports (with ``_app``, which holds the app and the commands of threads' life).
"""

from __future__ import annotations

import importlib

from longtask.cli._app import app, main

__all__ = ["MODULES", "app", "load", "main"]

#: the modules that register commands, in --help's order (``_app``'s commands come first)
ORDER = (
    "_pauses",
    "_control",
    "_costs",
    "_demo",
    "_travel",
    "_move",
    "_workers",
    "_prune",
    "_schedules",
    "_versions",
    "_migrate",
)

#: the module defining each command that is not ``_app``'s own (tests/unit/test_cli_help.py
#: holds it equal to what the modules register)
MODULES = {
    **dict.fromkeys(("approve", "reject", "signal", "pending", "tick", "effects"), "_pauses"),
    **dict.fromkeys(("cancel", "retry", "skip", "budget"), "_control"),
    "report": "_costs",
    "demo": "_demo",
    **dict.fromkeys(("history", "show", "diff", "branches", "fork"), "_travel"),
    "export": "_move",
    "import": "_move",
    **dict.fromkeys(("submit", "worker", "workers", "serve"), "_workers"),
    "prune": "_prune",
    "delete": "_prune",
    "schedule": "_schedules",
    "versions": "_versions",
    "check": "_migrate",
    "migrate": "_migrate",
}

#: ``_app``'s own commands and groups
OWN = frozenset(("run", "resume", "status", "result", "ls", "events", "watch", "artifacts", "db"))


def load(args: list[str] | None) -> None:
    """Register the command ``args`` names (every command for --help, no command, or a name
    that is none of them: its error suggests the near names)."""
    name = next((a for a in args or () if a != "--debug"), None)
    if name in OWN:
        return
    if name is not None and name in MODULES:
        importlib.import_module(f"longtask.cli.{MODULES[name]}")
        return
    for module in ORDER:
        importlib.import_module(f"longtask.cli.{module}")
