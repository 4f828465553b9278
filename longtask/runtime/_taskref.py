"""Task references: ``path/to/file.py:name`` or ``package.module:name``.

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
from longtask.model import LongTask, TaskVersions


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
    # Let the file import its neighbours, as `python file.py` would.
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.path.remove(str(path.parent))
    return module


def _from_factory(factory: Any, ref: str) -> Any:
    """What a callable the reference names makes, called with no arguments (a task
    factory); a callable that needs arguments, or fails, is no task."""
    try:
        inspect.signature(factory).bind()
    except TypeError:
        raise TaskRefError(
            f"{ref!r} is a {type(factory).__name__} that takes arguments, not a LongTask (or a "
            "function that makes one with no arguments); name the task itself"
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
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr:
        raise TaskRefError(
            f"task reference {ref!r} must look like path/to/file.py:task or package.module:task"
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
    if callable(task) and not isinstance(task, (LongTask, TaskVersions)):
        task = _from_factory(task, ref)
    if isinstance(task, TaskVersions):
        return task
    if not isinstance(task, LongTask):
        raise TaskRefError(f"{ref!r} is a {type(task).__name__}, not a LongTask")
    return TaskVersions([task])


def find_ref(task: LongTask) -> str | None:
    """The reference another process can load ``task`` by, if one can be found."""
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
