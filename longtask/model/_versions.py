"""Several definitions of one task, served side by side.

A thread runs on the definition whose hash it recorded when it started; a deploy that
changes a task keeps the old definition beside the new one until no live thread needs it
(``longtask versions``, ``longtask check``, ``longtask migrate``). New threads start on the
newest.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from longtask.errors import DefinitionError
from longtask.model._task import LongTask


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Order of version strings as people read them: ``"2" < "10"``, ``"1.2" < "1.10"``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part)
        for part in re.findall(r"\d+|[^\d.\-_]+", version)
    )


class TaskVersions:
    """Every definition of one task that this code can serve; ``newest`` starts new threads.

    ``versions(v2, v1)`` (in any order) keeps ``v1`` for the threads that started on it. All
    must share a name and have distinct versions; every problem is reported at once.
    """

    def __init__(self, tasks: Sequence[LongTask]) -> None:
        problems: list[str] = []
        tasks = list(tasks)
        if not tasks:
            raise DefinitionError("?", ["versions() needs at least one LongTask"])
        for t in tasks:
            if not isinstance(t, LongTask):
                problems.append(f"versions() takes LongTask objects, not {type(t).__name__}")
        tasks = [t for t in tasks if isinstance(t, LongTask)]
        names = sorted({t.name for t in tasks})
        if len(names) > 1:
            problems.append(
                f"versions() of one task must share its name, got {', '.join(map(repr, names))}"
            )
        seen: dict[tuple[tuple[int, int | str], ...], str] = {}
        for t in tasks:
            key = version_key(t.version)
            if key in seen:
                same = "" if seen[key] == t.version else f" (as {seen[key]!r})"
                problems.append(
                    f"version {t.version!r} is given twice{same}: give each definition its "
                    "own version="
                )
            seen[key] = t.version
        if problems:
            raise DefinitionError(names[0] if names else "?", problems)
        self._tasks = tuple(sorted(tasks, key=lambda t: version_key(t.version), reverse=True))

    @property
    def name(self) -> str:
        return self._tasks[0].name

    @property
    def newest(self) -> LongTask:
        return self._tasks[0]

    @property
    def all(self) -> tuple[LongTask, ...]:
        """Newest first."""
        return self._tasks

    def by_hash(self, definition_hash: str) -> LongTask | None:
        return next((t for t in self._tasks if t.definition_hash == definition_hash), None)

    def by_version(self, version: str) -> LongTask | None:
        return next((t for t in self._tasks if t.version == version), None)

    @property
    def hashes(self) -> frozenset[str]:
        return frozenset(t.definition_hash for t in self._tasks)

    def __iter__(self) -> Iterator[LongTask]:
        return iter(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, task: object) -> bool:
        return any(t is task for t in self._tasks)

    def __repr__(self) -> str:
        return f"versions({', '.join(f'{t.name}@{t.version}' for t in self._tasks)})"


def versions(*tasks: LongTask) -> TaskVersions:
    """Serve several definitions of one task: name the result in a task reference
    (``tasks.py:deploy`` where ``deploy = versions(deploy_v2, deploy_v1)``)."""
    return TaskVersions(tasks)
