"""``longtask versions``: the definitions of one task the code holds, beside the live threads
the database has on each (and on definitions the code no longer holds).

A read: it loads the task's code and reads thread records, and writes nothing. What a
deploy must still serve is a *live* thread (see :func:`longtask.store.is_live`).
"""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel

from longtask.model import TaskVersions
from longtask.store import Store


class VersionLine(BaseModel):
    """One definition: in the code, in the database, or both."""

    version: str
    definition_hash: str
    #: the code being read holds this definition (a thread on it can be served)
    in_code: bool
    #: new threads start on it
    newest: bool = False
    #: live threads on this definition, by status
    live: dict[str, int] = {}
    #: the first few of those threads (oldest first), to look at or migrate
    threads: list[str] = []

    @property
    def live_total(self) -> int:
        return sum(self.live.values())


class VersionReport(BaseModel):
    task: str
    lines: list[VersionLine]

    @property
    def unserved(self) -> int:
        """Live threads on definitions the code does not hold."""
        return sum(line.live_total for line in self.lines if not line.in_code)


#: how many thread ids a line lists
SHOWN = 5


def version_report(store: Store, family: TaskVersions) -> VersionReport:
    """Each definition in ``family`` (newest first), then each other definition live threads
    of the task are on, with those threads counted by status."""
    live = store.live_threads(family.name)
    counts: dict[str, Counter[str]] = {}
    ids: dict[str, list[str]] = {}
    recorded_version: dict[str, str] = {}
    for rec in live:
        counts.setdefault(rec.definition_hash, Counter())[rec.status] += 1
        ids.setdefault(rec.definition_hash, []).append(rec.thread_id)
        recorded_version.setdefault(rec.definition_hash, rec.task_version)

    def line(version: str, digest: str, in_code: bool, newest: bool = False) -> VersionLine:
        return VersionLine(
            version=version,
            definition_hash=digest,
            in_code=in_code,
            newest=newest,
            live=dict(sorted(counts.get(digest, Counter()).items())),
            threads=ids.get(digest, [])[:SHOWN],
        )

    lines = [line(t.version, t.definition_hash, True, t is family.newest) for t in family.all]
    lines += [
        line(recorded_version[digest], digest, False)
        for digest in ids
        if digest not in family.hashes
    ]
    return VersionReport(task=family.name, lines=lines)
