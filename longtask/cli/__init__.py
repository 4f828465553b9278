"""The ``longtask`` command line (typer): the top floor, where a person at a shell drives
threads, workers, ``serve`` and the demo. It may import every room below it (serve, demo,
the root package ``longtask``, ops, runtime and the rooms under runtime); no room imports
it, only ``longtask.__main__``.

``main`` answers ``--version`` before importing typer, rich or any command, and otherwise
imports only the module of the command it runs (``_commands``): each is part of every
command's cold start. ``app`` (every command registered) is imported when asked for.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--version"]:
        from longtask.cli._version import version_line

        print(version_line())
        sys.exit(0)
    from longtask.cli import _commands

    _commands.load(args)
    _commands.main(args)


def __getattr__(name: str) -> Any:
    if name == "app":
        from longtask.cli import _commands

        _commands.load(None)
        return _commands.app
    raise AttributeError(f"module 'longtask.cli' has no attribute {name!r}")
