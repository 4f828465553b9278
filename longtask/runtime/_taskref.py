"""Task references: ``path/to/file.py:name`` or ``package.module:name``.

A reference may name a plain LangGraph graph instead of a LongTask (a compiled graph, a
``StateGraph`` builder, or a factory taking the run's config, as langgraph.json allows): it
loads as the one-step LongTask around it (``model.graph_app``), named after the attribute,
or after the graph id a ``#name`` suffix gives (``src/agent/graph.py:graph#agent``, what
``longtask serve --config langgraph.json`` records for the graph id ``agent``).

A thread records the reference of the task it runs, so that any later process (the CLI, a
worker on another machine) can load the same definition to resume it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from longtask.errors import TaskRefError
from longtask.model import GraphApp, LongTask, TaskVersions, graph_app, graph_kind
from longtask.runtime._toolmarks import tool_marks


def _module_name_for(path: Path) -> str:
    # Stable across processes (pydantic models defined in the file are stored by module
    # path), and unlikely to shadow a real module.
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    return f"longtask_task_{path.stem}_{digest}"


def _load_file(path: Path) -> ModuleType:
    path = path.resolve()
    name = _module_name_for(path)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TaskRefError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # Let the file import its neighbours, as `python file.py` would, and the package it is
    # in by its name (a template's src/agent/graph.py imports `agent.tools`), as an
    # installed project lets it.
    root = path.parent
    while (root / "__init__.py").is_file() and root.parent != root:
        root = root.parent
    added = [p for p in dict.fromkeys((str(path.parent), str(root))) if p not in sys.path]
    sys.path[:0] = added
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        for p in added:
            sys.path.remove(p)
    return module


def load_module(target: str, base: Path) -> ModuleType:
    """The module the left side of a ``target:name`` reference names: a file (``.py``, or a
    path; relative to ``base``) loaded as a task's file is (beside its neighbours and its
    package), or an importable module. A missing file is a TaskRefError naming it; what the
    module raises while it loads is raised."""
    if target.endswith(".py") or "/" in target:
        file = (base / target).resolve()
        if not file.is_file():
            raise TaskRefError(f"no file {str(file)!r}")
        return _load_file(file)
    return importlib.import_module(target)


#: what a reference may name besides a LongTask: the graphs langgraph.json serves
_GRAPH = object()


def _takes_config(factory: Any) -> bool:
    """Whether ``factory`` is called with one argument (a graph factory taking the run's
    config, as langgraph.json allows), not with none (a task factory)."""
    try:
        inspect.signature(factory).bind()
    except TypeError:
        pass
    except ValueError:  # no signature to read (some builtins): a task factory, tried
        return False
    else:
        return False
    try:
        inspect.signature(factory).bind({})
    except TypeError:
        return False
    return True


def _from_factory(factory: Any, ref: str) -> Any:
    """What a callable the reference names makes, called with no arguments (a task
    factory, or a graph factory without one); a graph factory taking the run's config is
    kept (``_GRAPH``: it is called for each run); any other callable that needs
    arguments, or fails, is no task."""
    if inspect.iscoroutinefunction(factory) or inspect.isasyncgenfunction(factory):
        raise TaskRefError(
            f"{ref!r} is an async function; longtask takes a graph, a StateGraph builder or "
            "a plain function making one (from the run's config), not an async factory"
        )
    if _takes_config(factory):
        # Called once here with an empty config, as LangGraph's server calls a factory to
        # read its graph's schemas: a function of one argument that makes no graph is no
        # graph factory, and is refused now rather than when a run starts.
        try:
            made = factory({"configurable": {}})
        except Exception:
            made = None
        if graph_kind(made) in ("compiled", "builder"):
            return _GRAPH
    try:
        inspect.signature(factory).bind()
    except TypeError:
        raise TaskRefError(
            f"{ref!r} is a {type(factory).__name__} that takes arguments, not a LongTask (or a "
            "function that makes one with no arguments, or a LangGraph graph factory taking "
            "the run's config); name the task itself"
        ) from None
    except ValueError:  # no signature to read (some builtins): try the call
        pass
    try:
        return factory()
    except Exception as exc:
        raise TaskRefError(
            f"{ref!r} is not a LongTask, and calling it to make one failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def load_task(ref: str) -> LongTask:
    """Import the LongTask named by ``ref`` (the newest, when it names several versions).
    Errors say which part of the reference failed."""
    return load_versions(ref).newest


def load_versions(ref: str) -> TaskVersions:
    """Every definition of the task ``ref`` names (a LongTask, a :func:`~longtask.versions`
    of several, or a function making either), newest first."""
    config: Path | None = None
    head, at, where = ref.rpartition("@")
    if at and "#" in head and where.endswith(".json") and Path(where).is_absolute():
        # a served graph's config file, which holds its tool marks (``_toolmarks``)
        ref, config = head, Path(where)
    target, sep, attr = ref.rpartition(":")
    attr, hashed, graph_id = attr.partition("#")
    if not sep or not target or not attr or (hashed and not graph_id):
        raise TaskRefError(
            f"task reference {ref!r} must look like path/to/file.py:task or package.module:task "
            "(a LangGraph graph may be given a name: path/to/graph.py:graph#agent)"
        )
    if ":" in target and not Path(target).is_file():
        raise TaskRefError(
            f"task reference {ref!r} has too many colons: write path/to/file.py:task or "
            "package.module:task, with one colon before the task's name"
        )
    try:
        if target.endswith(".py") or os.sep in target:
            path = Path(target)
            if not path.is_file():
                raise TaskRefError(f"task file {target!r} does not exist (from {ref!r})")
            module = _load_file(path)
        else:
            if os.getcwd() not in sys.path and "" not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(target)
    except TaskRefError:
        raise
    except SystemExit as exc:
        # Else the file's exit code would become longtask's (3 reads as "paused").
        raise TaskRefError(
            f"importing {target!r} for task reference {ref!r} called sys.exit({exc.code!r}); "
            "a task file must define its task without exiting (guard a script's own code "
            'with `if __name__ == "__main__":`)'
        ) from None
    except Exception as exc:
        raise TaskRefError(
            f"cannot import {target!r} for task reference {ref!r}: {type(exc).__name__}: {exc}"
        ) from exc
    task = getattr(module, attr, None)
    if task is None:
        raise TaskRefError(f"{target!r} has no attribute {attr!r} (from {ref!r})")
    graph = task if graph_kind(task) in ("compiled", "builder") else None
    if graph is None and callable(task) and not isinstance(task, (LongTask, TaskVersions)):
        made = _from_factory(task, ref)
        if made is _GRAPH or graph_kind(made) in ("compiled", "builder"):
            graph = task  # a factory: called for each run, as LangGraph's server does
        else:
            task = made
    if graph is not None:
        # A plain LangGraph graph: served as the one-step LongTask around it.
        tools = (
            tool_marks(config, graph_id, _load_file) if config is not None and graph_id else None
        )
        app = graph_app(graph_id or attr, graph, description=f"LangGraph {ref}", tools=tools)
        if target.endswith(".py") or os.sep in target:
            # absolute, so the thread is resumed from any working directory
            target = str(Path(target).resolve())
        app._ref = f"{target}:{attr}" + (f"#{graph_id}" if graph_id else "")
        if tools is not None and config is not None:
            app._ref += f"@{config}"
        return TaskVersions([app])
    if graph_id:
        raise TaskRefError(
            f"{ref!r} names a {type(task).__name__}: a '#name' is given only to a LangGraph "
            f"graph (a LongTask has its own name); drop '#{graph_id}'"
        )
    if isinstance(task, TaskVersions):
        return task
    if not isinstance(task, LongTask):
        raise TaskRefError(
            f"{ref!r} is a {type(task).__name__}, not a LongTask or a LangGraph graph (a "
            "compiled graph, a StateGraph builder, or a function making one)"
        )
    return TaskVersions([task])


def find_ref(task: LongTask) -> str | None:
    """The reference another process can load ``task`` by, if one can be found."""
    if isinstance(task, GraphApp) and task._ref is not None:
        return task._ref
    module_name = task._module
    module = sys.modules.get(module_name) if module_name else None
    if module is None:
        return None
    attr = next((k for k, v in vars(module).items() if v is task), None) or next(
        (k for k, v in vars(module).items() if isinstance(v, TaskVersions) and task in v), None
    )
    if attr is None:
        return None
    file = getattr(module, "__file__", None)
    if module_name == "__main__" or (module_name or "").startswith("longtask_task_"):
        if not file:
            return None
        # Absolute, so the thread can be resumed from any working directory.
        return f"{Path(file).resolve()}:{attr}"
    return f"{module_name}:{attr}"
