"""Task references: ``path/to/file.py:name`` or ``package.module:name``.

A thread records the reference of the task it runs, so that any later process (the CLI, a
worker on another machine) can load the same definition to resume it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from longtask.errors import TaskRefError
from longtask.model import LongTask


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
    except Exception:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.path.remove(str(path.parent))
    return module


def load_task(ref: str) -> LongTask:
    """Import the LongTask named by ``ref``. Errors say which part of the reference failed."""
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
    except Exception as exc:
        raise TaskRefError(
            f"cannot import {target!r} for task reference {ref!r}: {type(exc).__name__}: {exc}"
        ) from exc
    task = getattr(module, attr, None)
    if task is None:
        raise TaskRefError(f"{target!r} has no attribute {attr!r} (from {ref!r})")
    if callable(task) and not isinstance(task, LongTask):
        task = task()
    if not isinstance(task, LongTask):
        raise TaskRefError(f"{ref!r} is a {type(task).__name__}, not a LongTask")
    return task


def find_ref(task: LongTask) -> str | None:
    """The reference another process can load ``task`` by, if one can be found."""
    module_name = task._module
    module = sys.modules.get(module_name) if module_name else None
    if module is None:
        return None
    attr = next((k for k, v in vars(module).items() if v is task), None)
    if attr is None:
        return None
    file = getattr(module, "__file__", None)
    if module_name == "__main__" or (module_name or "").startswith("longtask_task_"):
        if not file:
            return None
        # Absolute, so the thread can be resumed from any working directory.
        return f"{Path(file).resolve()}:{attr}"
    return f"{module_name}:{attr}"
