"""Names a package re-exports but imports on first use: the public names of ``longtask``,
``longtask.runtime`` and ``longtask.ops`` pull in LangGraph, which a process that only reads
(``longtask status``) or asks for ``--help`` never needs. On the lowest floor: any room's
``__init__`` may use it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package`` for ``names`` (each name to the module that
    defines it): imports the module on first use and keeps the value in the package."""

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
            setattr(sys.modules[package], name, value)  # looked up once
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
