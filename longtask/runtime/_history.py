"""Time travel: the state at a checkpoint, differences, branches and forks (the list of
checkpoints, ``history``, is a read without LangGraph: ``runtime._reading``).

Reads are bounded: ``branches`` reads only the id and parent id of each checkpoint, never
their state.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from langgraph.types import StateUpdate
from pydantic import BaseModel

from longtask.errors import InvalidInput
from longtask.runtime._gate import through
from longtask.runtime._views import CheckpointState
from longtask.steps import INPUTS_CHANNEL, result_channel
from longtask.store import NewEvent

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

    from longtask.checkpointers import Database
    from longtask.model import LongTask
    from longtask.runtime._engine import Engine
    from longtask.runtime._reading import Reads
    from longtask.store import ValueCodec


class Branch(BaseModel):
    """A line of checkpoints from the first one to a head (a checkpoint without children)."""

    head: str
    #: where it leaves an older branch (None for the original line)
    forked_from: str | None
    length: int
    current: bool


class StepDiff(BaseModel):
    step: str
    change: str  # "added", "removed", "changed"
    before: Any = None
    after: Any = None


def _cfg(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


class TimeTravel:
    """A thread's past: the state at a checkpoint, what changed between two, its branches,
    and forks from a past checkpoint. ``engine`` gives the task's graph (LangGraph's
    ``get_state`` and ``update_state`` do the work) and checks a fork's inputs."""

    def __init__(self, db: Database, codec: ValueCodec, reads: Reads, engine: Engine) -> None:
        self.db = db
        self.codec = codec
        self._reads = reads
        self._engine = engine

    def at(
        self, thread_id: str, checkpoint_id: str, *, task: LongTask | None = None
    ) -> CheckpointState:
        """The task's state at ``checkpoint_id``: results, what runs next, interrupts."""
        rec = self._reads.thread(thread_id)
        task = task or self._engine.load(rec)
        snapshot = self._engine.graph(task).get_state(_cfg(thread_id, checkpoint_id))
        if not snapshot.config or snapshot.created_at is None:
            raise InvalidInput(
                f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}; see `longtask "
                f"history {thread_id}`"
            )
        values = dict(snapshot.values or {})
        parent = (snapshot.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        return CheckpointState(
            thread_id=thread_id,
            checkpoint_id=checkpoint_id,
            parent_id=parent,
            created_at=snapshot.created_at,
            results={
                k[4:]: self.codec.decode(v, strict=False)
                for k, v in sorted(values.items())
                if k.startswith("out.")
            },
            next=list(snapshot.next),
            interrupts=[
                {"node": t.name, "id": i.id, "value": i.value}
                for t in snapshot.tasks
                for i in t.interrupts
            ],
        )

    def diff(
        self, thread_id: str, a: str, b: str, *, task: LongTask | None = None
    ) -> list[StepDiff]:
        """How the step results differ from checkpoint ``a`` to checkpoint ``b``."""
        rec = self._reads.thread(thread_id)
        task = task or self._engine.load(rec)
        left, right = self.at(thread_id, a, task=task), self.at(thread_id, b, task=task)
        out = []
        for name in sorted(left.results.keys() | right.results.keys()):
            if name not in right.results:
                out.append(StepDiff(step=name, change="removed", before=left.results[name]))
            elif name not in left.results:
                out.append(StepDiff(step=name, change="added", after=right.results[name]))
            elif left.results[name] != right.results[name]:
                out.append(
                    StepDiff(
                        step=name,
                        change="changed",
                        before=left.results[name],
                        after=right.results[name],
                    )
                )
        return out

    def branches(self, thread_id: str) -> list[Branch]:
        """Every line of the thread's checkpoints, from its first checkpoint (or the fork
        point) to a head; ``current`` is the one ``resume`` continues (the newest head)."""
        self._reads.thread(thread_id)
        rows = self.db.store.checkpoint_tree(thread_id)  # in the thread's order
        parent = dict(rows)
        children: dict[str | None, list[str]] = {}
        for cid, pid in rows:
            children.setdefault(pid, []).append(cid)
        heads = [c for c, _ in rows if c not in children]
        newest = rows[-1][0] if rows else None
        out = []
        claimed: set[str] = set()
        # Oldest head first: the original line claims its checkpoints before the forks.
        for head in heads:
            line = []
            node: str | None = head
            while node is not None and node not in claimed:
                line.append(node)
                node = parent.get(node)
            claimed.update(line)
            out.append(
                Branch(head=head, forked_from=node, length=len(line), current=head == newest)
            )
        return out

    def fork(
        self,
        thread_id: str,
        checkpoint_id: str,
        *,
        update: dict[str, Any] | None = None,
        inputs: Any = None,
        by: str | None = None,
        task: LongTask | None = None,
    ) -> str:
        """Start a new branch at a past checkpoint with changed step results (as if each
        step had just returned its new value) or changed inputs; returns the new branch's
        first checkpoint. ``resume`` then runs forward from it: the steps after a changed
        one run again, effects with unchanged arguments return their recorded results, and
        an approval runs again too — keeping its earlier decision if the plan is the same,
        asking again if the plan changed."""
        from longtask.runtime._who import whoami

        rec = self._reads.thread(thread_id)
        task = task or self._engine.load(rec)
        if not update and inputs is None:
            raise InvalidInput("say what changes on the fork: update={step: result} or inputs=")
        if update is not None and not isinstance(update, dict):
            raise InvalidInput("a fork's update is a dict of step name to its new result")
        tup = self.db.saver.get_tuple(_cfg(thread_id, checkpoint_id))
        if tup is None:
            raise InvalidInput(
                f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}; see `longtask "
                f"history {thread_id}`"
            )
        updates = [
            StateUpdate({k: v}, as_node=k if k in task.steps else None)
            for k, v in (update or {}).items()
        ]
        # A step after a changed one that waits for several steps (a join) runs only when
        # all of them have written: write the unchanged ones back with their stored values
        # (the gate lets a value written back as it is through, a pause's decision too).
        stored = dict(tup.checkpoint.get("channel_values", {}))
        changed = set(update or {})
        again: set[str] = set()
        for info in task.layout.values():
            if changed & set(info.depends_on) and len(info.depends_on) > 1:
                again.update(d for d in info.depends_on if d not in changed)
        updates += [
            StateUpdate({result_channel(d): stored[result_channel(d)]}, as_node=d)
            for d in sorted(again)
            if result_channel(d) in stored
        ]
        if inputs is not None:
            updates.append(StateUpdate({INPUTS_CHANNEL: inputs}, as_node=None))
        who = by or whoami()
        record = NewEvent(
            thread_id,
            "manual.fork",
            key=f"manual.fork/{uuid.uuid4().hex}",
            data={
                "by": who,
                "checkpoint": checkpoint_id,
                "steps": sorted(update or {}),
                "inputs": inputs is not None,
            },
        )
        with through("fork", who, also=(record,)):
            new = self._engine.graph(task).bulk_update_state(
                _cfg(thread_id, checkpoint_id), [updates]
            )
        return str(new["configurable"]["checkpoint_id"])
