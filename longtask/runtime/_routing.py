"""Workers route threads by definition: a worker whose code lacks a thread's definition hands
the job back instead of running the thread on other code.

During a rolling deploy old and new workers serve one queue side by side. A thread runs on
the definition whose hash it recorded; a worker that cannot load that definition (its
module has only other versions, or no such module at all) must not touch the thread: no
lock, no lease epoch, no inbox change, no event. It queues a wake-up for later and ends the
job, so the thread waits — unchanged — until a worker that has the definition takes it.

Two cases run on any worker, as before:

- A completed or cancelled thread: nothing the job does there runs the definition's steps
  (a late command finds nothing to resume), and a thread finished on a version since
  removed everywhere must not bounce between workers for ever.
- A thread whose next inbox entry is a resume with ``allow_changed_definition``: the
  operator asked for the thread to continue on the code deployed, whatever it records. The
  worker that takes it runs its own newest definition — during a rolling deploy that may be
  the old code, so force a thread only once every worker runs the new one (or use
  ``longtask migrate``, which is checked).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from longtask.errors import TaskRefError
from longtask.model import TaskVersions, version_key
from longtask.runtime._taskref import load_versions

if TYPE_CHECKING:
    from longtask.store import Store, ThreadRecord

log = logging.getLogger("longtask.workers")

#: seconds before the first retry of a handed-back thread; doubled at each hand-back of the
#: same thread by the same worker, up to HANDBACK_MAX
HANDBACK_FIRST = 1.0
HANDBACK_MAX = 30.0
#: the wait when another live worker says it serves the definition: it may take the job
HANDBACK_SOON = 1.0
#: threads whose hand-backs a worker remembers (for the backoff); the oldest are forgotten
_REMEMBERED = 10_000


def short_hash(definition_hash: str) -> str:
    return definition_hash[:12]


def version_label(version: str) -> str:
    return version if version[:1] in ("v", "V") else f"v{version}"


@dataclass(frozen=True)
class Lacking:
    """Why this worker cannot serve a thread now."""

    thread_id: str
    definition_hash: str
    version: str
    #: "lacks definition 1a2b3c4d5e6f (v2)", or "cannot load its task: ..."
    reason: str
    #: False when the task reference did not load at all (a deployment problem, logged
    #: louder than a version this worker is not meant to serve)
    imported: bool = True


def _forced(command: Mapping[str, Any]) -> bool:
    return command.get("kind") == "resume" and bool(command.get("allow_changed_definition"))


class Routing:
    """What a worker's code serves, and the threads it handed back (thread-safe: jobs run
    in several threads of one worker)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: task name -> version -> short hash, of every family loaded so far
        self._serves: dict[str, dict[str, str]] = {}
        self._tries: OrderedDict[str, int] = OrderedDict()
        self.handed_back = 0

    def lacking(self, store: Store, thread_id: str) -> Lacking | None:
        """Whether this worker must hand the thread's job back. Reads only."""
        rec = store.get_thread(thread_id)
        if rec is None or rec.status in ("completed", "cancelled") or not rec.task_ref:
            return None  # the job does what it always did (see the module's docstring)
        entries = store.inbox_peek(thread_id)
        if entries and _forced(entries[0][1]):
            return None
        try:
            family = load_versions(rec.task_ref)
        except TaskRefError as exc:
            # A worker deployed without the task's module: another may have it.
            return self._lack(rec, f"cannot load its task: {exc}", imported=False)
        self._record(family)
        if family.by_hash(rec.definition_hash) is not None:
            return None
        return self._lack(
            rec,
            f"lacks definition {short_hash(rec.definition_hash)} "
            f"({version_label(rec.task_version)})",
        )

    def _lack(self, rec: ThreadRecord, reason: str, *, imported: bool = True) -> Lacking:
        return Lacking(rec.thread_id, rec.definition_hash, rec.task_version, reason, imported)

    def _record(self, family: TaskVersions) -> None:
        with self._lock:
            known = self._serves.setdefault(family.name, {})
            for task in family:
                known[task.version] = short_hash(task.definition_hash)

    def served(self, thread_id: str) -> None:
        """The thread ran here: a later hand-back of it starts the backoff afresh."""
        with self._lock:
            self._tries.pop(thread_id, None)

    def hand_back_delay(self, lack: Lacking, elsewhere: bool) -> float:
        """Seconds until the thread's next wake-up; counts the hand-back. ``elsewhere``:
        another live worker says it serves the definition."""
        with self._lock:
            self.handed_back += 1
            tries = self._tries.pop(lack.thread_id, 0)
            self._tries[lack.thread_id] = tries + 1
            while len(self._tries) > _REMEMBERED:
                self._tries.popitem(last=False)
        if elsewhere:
            return HANDBACK_SOON
        return float(min(HANDBACK_MAX, HANDBACK_FIRST * 2 ** min(tries, 16)))

    def serves(self) -> list[dict[str, str]]:
        """For the heartbeat row: each definition loaded, by task, oldest version first."""
        with self._lock:
            return [
                {"task": name, "version": version, "hash": digest}
                for name in sorted(self._serves)
                for version, digest in sorted(
                    self._serves[name].items(), key=lambda item: version_key(item[0])
                )
            ]


def served_elsewhere(store: Store, lack: Lacking, me: str, since: float) -> bool:
    """Whether a live worker other than ``me`` (heartbeat since ``since``) has said it serves
    the definition the thread lacks."""
    digest = short_hash(lack.definition_hash)
    return any(
        w.name != me and w.stopped_at is None and any(s.get("hash") == digest for s in w.serves)
        for w in store.workers(since)
    )


def describe_serves(serves: list[dict[str, str]]) -> str:
    """``demo v1, v2; other v3`` (the order of ``Routing.serves``)."""
    by_task: dict[str, list[str]] = {}
    for s in serves:
        by_task.setdefault(str(s.get("task")), []).append(version_label(str(s.get("version"))))
    return "; ".join(f"{task} {', '.join(versions)}" for task, versions in by_task.items())
