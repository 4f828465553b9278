"""``longtask --version`` without the command line: typer, rich and the commands are most
of a cold process's time, and a version check (scripts, bug reports) needs none of them."""

from __future__ import annotations

import sys


def version_line() -> str:
    return (
        f"longtask {_dist_version('langgraph-longtask')} (langgraph {_dist_version('langgraph')})"
    )


def _dist_version(dist: str) -> str:
    """An installed distribution's version, read from its ``*.dist-info`` directory name on
    ``sys.path``: ``importlib.metadata`` parses every installed distribution's metadata
    first, which costs more than the rest of ``--version``."""
    import os

    prefix = dist.replace("-", "_").lower() + "-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            low = name.lower()
            if low.startswith(prefix) and low.endswith(".dist-info"):
                return name[len(prefix) : -len(".dist-info")]
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"
