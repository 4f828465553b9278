"""The tasks ``longtask serve`` offers: loaded from ``--task`` references and a
``longtask.json``, by name, each as one LangGraph Server API assistant.

An assistant's id is a UUID derived from the task name (the way the LangGraph server derives
one from a graph id), its ``graph_id`` the task name. A request may name an assistant by
either. It imports no other module of serve: the assistants' routes, the executor and the
state views are handed a ``Registry`` and import only its types from here.
"""

from __future__ import annotations

import functools
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from longtask.errors import DefinitionError, InvalidInput, TaskRefError

if TYPE_CHECKING:
    from longtask.model import LongTask, TaskVersions
    from longtask.store import ThreadRecord

#: the namespace the LangGraph server derives an assistant id from a graph id in
NAMESPACE_GRAPH = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")
#: the file ``longtask serve`` reads tasks from when it is in the working directory
CONFIG_FILE = "longtask.json"
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC).isoformat()


def assistant_id(name: str) -> str:
    return str(uuid.uuid5(NAMESPACE_GRAPH, name))


@dataclass(frozen=True)
class Registered:
    name: str
    #: the reference a new thread records: one that loads ``task``
    ref: str
    #: the newest definition: what a new thread starts on
    task: LongTask
    #: every definition served under this name (``task`` among them)
    family: TaskVersions | None = None

    def for_thread(self, rec: ThreadRecord) -> LongTask:
        """The definition a started thread runs on: the one whose hash it recorded when it
        is served here, else the newest (which the definition check then refuses unless the
        change is allowed)."""
        found = self.family.by_hash(rec.definition_hash) if self.family is not None else None
        return found or self.task

    @property
    def assistant_id(self) -> str:
        return assistant_id(self.name)

    @functools.cached_property
    def graph(self) -> Any:
        """The user's compiled graph a served LangGraph graph runs (None: a LongTask, or a
        graph made per run by a factory)."""
        from longtask.model import GraphApp

        if not isinstance(self.task, GraphApp):
            return None
        graph = self.task.graph_step.graph
        if not hasattr(graph, "get_input_jsonschema") and hasattr(graph, "compile"):
            graph = graph.compile()  # a StateGraph builder: compiled as the step compiles it
        return graph if hasattr(graph, "get_input_jsonschema") else None

    def to_json(self) -> dict[str, Any]:
        # As LangGraph's server names a graph's assistant: the graph's own name, unless it
        # has LangGraph's default one
        own = getattr(self.graph, "name", None)
        return {
            "assistant_id": self.assistant_id,
            "graph_id": self.name,
            "name": own if isinstance(own, str) and own and own != "LangGraph" else self.name,
            "description": None,
            "config": {},
            "context": {},
            "metadata": {"created_by": "system", "task_ref": self.ref},
            "version": 1,
            "created_at": _EPOCH,
            "updated_at": _EPOCH,
        }


class Registry:
    """The tasks ``longtask serve`` offers as assistants, by name."""

    def __init__(self, entries: list[Registered] | None = None) -> None:
        self.by_name: dict[str, Registered] = {}
        for entry in entries or []:
            if entry.name in self.by_name and self.by_name[entry.name].ref != entry.ref:
                raise InvalidInput(
                    f"two tasks are registered as {entry.name!r} ({self.by_name[entry.name].ref} "
                    f"and {entry.ref}); give them different names in {CONFIG_FILE}"
                )
            self.by_name[entry.name] = entry
        self._by_id = {e.assistant_id: e for e in self.by_name.values()}

    def __len__(self) -> int:
        return len(self.by_name)

    def find(self, key: str) -> Registered | None:
        """The task an assistant id or a graph id (task name) names."""
        return self._by_id.get(key) or self.by_name.get(key)

    def get(self, key: str) -> Registered:
        found = self.find(key)
        if found is None:
            known = ", ".join(sorted(self.by_name)) or "none (start serve with --task)"
            raise LookupError(f"no assistant {key!r}; registered tasks: {known}")
        return found


def load_registry(refs: list[str], config: str | Path | None = None) -> Registry:
    """Tasks from ``--task REF`` options and a ``longtask.json`` (``{"tasks": {name: ref}}``,
    where a name may map to a list of refs: several versions of one task, served side by
    side; a langgraph.json-style ``graphs`` key is read the same way). With no ``config``, a
    ``longtask.json`` in the working directory is read if there is one."""
    from longtask.model import GraphApp
    from longtask.runtime import config_tools, load_versions

    groups: list[tuple[str | None, list[str]]] = [(None, [r]) for r in refs]
    path = Path(config) if config is not None else Path(CONFIG_FILE)
    if config is not None or path.exists():
        groups.extend(_config_pairs(path))
    entries = []
    for name, group in groups:
        loaded: list[tuple[str, TaskVersions]] = []
        for ref in group:
            try:
                family = load_versions(ref)
                if name is not None and isinstance(family.newest, GraphApp):
                    # A plain LangGraph graph is served under its graph id: the reference a
                    # thread records (and a worker loads) says it.
                    ref = f"{ref.partition('#')[0]}#{name}"
                    if config_tools(path, name) is not None:
                        # its tool marks are in the config: the reference names it
                        ref += f"@{path.resolve()}"
                    family = load_versions(ref)
                loaded.append((ref, family))
            except TaskRefError:
                raise
            except Exception as exc:  # an import error in the task's module
                raise TaskRefError(f"cannot load task {ref!r}: {exc}") from exc
        family = _merge(name, loaded)
        # A new thread records a reference that loads the definition it starts on.
        ref = next(r for r, f in loaded if family.newest in f)
        entries.append(Registered(name or family.name, ref, family.newest, family))
    return Registry(entries)


def _merge(name: str | None, loaded: list[tuple[str, TaskVersions]]) -> TaskVersions:
    """The versions several refs of one name hold, as one family (a definition two refs
    both hold counts once)."""
    from longtask.model import versions

    if len(loaded) == 1:
        return loaded[0][1]
    tasks: dict[str, LongTask] = {}
    for _ref, family in loaded:
        for task in family:
            tasks.setdefault(task.definition_hash, task)
    try:
        return versions(*tasks.values())
    except DefinitionError as exc:
        refs = ", ".join(r for r, _ in loaded)
        problems = "; ".join(exc.problems)
        raise InvalidInput(
            f"the refs {name!r} maps to in {CONFIG_FILE} ({refs}) are not versions of one "
            f"task: {problems}"
        ) from exc


def config_key(config: str | Path | None, key: str) -> tuple[Path, Any] | None:
    """A config file's (a longtask.json or langgraph.json; by default the one in the working
    directory) value at top-level ``key``, and the file; None if there is no file or no such
    key (a file that is not JSON: ``load_registry`` says what is wrong with it)."""
    path = Path(config) if config is not None else Path(CONFIG_FILE)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    value = data.get(key) if isinstance(data, dict) else None
    return None if value is None else (path, value)


def auth_path(config: str | Path | None = None) -> tuple[str, Path] | None:
    """The ``auth.path`` of a longtask.json or langgraph.json (``{"auth": {"path":
    "./auth.py:auth"}}``, LangGraph's auth handlers) and the folder it is relative to;
    None if it names none. (The file's tasks are read by ``load_registry``.)"""
    found = config_key(config, "auth")
    if found is None:
        return None
    path, auth = found
    if not isinstance(auth, dict) or not isinstance(auth.get("path"), str):
        raise InvalidInput(
            f'{path}: "auth" must be {{"path": "./auth.py:auth"}}, naming a langgraph_sdk.Auth'
        )
    return auth["path"], path.resolve().parent


def _config_pairs(path: Path) -> list[tuple[str | None, list[str]]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InvalidInput(f"no task file {str(path)!r}") from None
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{path} is not readable JSON: {exc}") from None
    table = data.get("tasks", data.get("graphs")) if isinstance(data, dict) else None
    if isinstance(data, dict):
        _dependencies(path, data.get("dependencies"))

    def refs(value: object) -> list[str] | None:
        if isinstance(value, dict) and isinstance(value.get("path"), str):
            value = value["path"]  # langgraph.json's {"path": ..., "description": ...}
        if isinstance(value, str):
            return [_beside(path, value)]
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return [_beside(path, v) for v in value]
        return None

    if not isinstance(table, dict) or not all(
        isinstance(k, str) and refs(v) is not None for k, v in table.items()
    ):
        raise InvalidInput(
            f'{path} must hold {{"tasks": {{"name": "package.module:task"}}}}, where a name '
            'may map to a list of refs (several versions: ["pkg.mod:task_v2", '
            '"pkg.mod:task_v1"]), or a langgraph.json-style "graphs" object'
        )
    return [(name, refs(value) or []) for name, value in table.items()]


def _beside(config: Path, ref: str) -> str:
    """A file reference of a config file read relative to the file (as langgraph.json's
    are), made absolute so that a worker in another directory loads it too; a module
    reference, or a file that is only found from the working directory, as given."""
    target, sep, attr = ref.rpartition(":")
    if not sep or not (target.endswith(".py") or "/" in target) or Path(target).is_absolute():
        return ref
    found = (config.resolve().parent / target).resolve()
    return f"{found}:{attr}" if found.is_file() else ref


def _dependencies(config: Path, deps: object) -> None:
    """langgraph.json's local ``dependencies`` (``"."``, ``"./my_pkg"``) importable, as
    installing the project makes them for ``langgraph dev``: each directory, and its
    ``src/`` when it has one, goes on ``sys.path``. Package names (installed from a
    registry by ``langgraph build``) are left to the environment."""
    import sys

    if not isinstance(deps, list):
        return
    for dep in deps:
        if not isinstance(dep, str) or not dep.startswith("."):
            continue
        where = (config.resolve().parent / dep).resolve()
        for folder in (where / "src", where):
            if folder.is_dir() and str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
