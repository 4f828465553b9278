"""The house's shape, read from the code's own imports (issue 31): rooms stand on floors and
import only rooms below them, and no module imports, directly or through others, a module
that imports it back.

Every import statement counts: at module level, inside a function (a lazy import is still a
dependency, only a later one) and under ``if TYPE_CHECKING`` (a type is a dependency too).
Importing ``a.b.c`` also runs the ``__init__`` of ``a.b`` (unless the importer is inside it),
so that counts as importing the package. Read with ``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "longtask"

#: the floors, lowest first: a room imports only rooms on floors below its own (and itself).
#: ``longtask`` is the root package: its ``__init__`` (the public names) and ``_runner`` (the
#: Runner façade over runtime's and ops' parts); ``errors``, ``_version``, ``_lazy`` and
#: ``_schema_example`` are modules of the root that every room may import (light: the CLI's
#: reads use them). docs/architecture.md draws the same floors.
FLOORS: list[set[str]] = [
    {"errors", "_version", "_lazy", "_schema_example"},
    {"model", "store"},
    {"checkpointers", "steps"},
    {"graphs"},
    {"runtime"},
    {"ops"},
    {"longtask"},
    {"serve", "demo"},
    {"cli"},
    {"__main__"},
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _named(importer: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The dotted names an import statement asks for (a module, or a name in one)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = importer if _is_package(importer) else importer.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names)


def _module_of(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _ancestors(name: str) -> Iterator[str]:
    while "." in name:
        name = name.rpartition(".")[0]
        yield name


def imports() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for asked in _named(name, node):
                target = _module_of(asked)
                if target is None or target == name:
                    continue
                deps.add(target)
                # the packages the target sits in run first, unless the importer is in them
                inside = set(_ancestors(name)) | {name}
                deps.update(p for p in _ancestors(target) if p not in inside)
        deps.discard(name)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each as one cycle
    through its modules, for the message."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_cycle(graph, group) for group in groups]


def _one_cycle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """The shortest way from the group's first module back to itself, through the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & group):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    return sorted(group)


def _room(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and not _is_package(module) and parts[1] == "_runner"):
        return "longtask"
    return parts[1]


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    found = _cycles(imports())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_every_room_stands_on_a_floor() -> None:
    rooms = {_room(m) for m in MODULES}
    placed = set().union(*FLOORS)
    assert rooms <= placed, f"rooms on no floor: {sorted(rooms - placed)}"


def test_rooms_import_only_the_floors_below_them() -> None:
    floor = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}
    upward = sorted(
        f"{module} ({_room(module)}) imports {target} ({_room(target)})"
        for module, targets in imports().items()
        for target in targets
        if _room(target) != _room(module) and floor[_room(target)] >= floor[_room(module)]
    )
    assert not upward, "imports up or sideways:\n" + "\n".join(upward)


def test_the_walk_sees_every_kind_of_import() -> None:
    """The rules read lazy and type-only imports too: a module that has both."""
    graph = imports()
    # the CLI's package imports its commands' module lazily, inside main()
    assert "longtask.cli._commands" in graph["longtask.cli"]
    # runtime/__init__ names its lazy exports under TYPE_CHECKING
    assert "longtask.runtime._reader" in graph["longtask.runtime"]
