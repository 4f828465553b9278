"""Reading longtask's checkpoint tables without LangGraph: what ``status``, ``result`` and
the other reads of a CLI process need, in a process that never runs a graph (importing
LangGraph costs such a process most of its time).

:class:`CheckpointReader` rebuilds checkpoints from the rows ``_saver`` writes (see its
docstring for the tables): version maps from their snapshots and deltas, values and pending
writes in one query each. :class:`~longtask.checkpointers._saver.LongTaskSaver` is a
reader too, with LangGraph's ``CheckpointTuple`` and serializer; a bare reader gives tuples
with the same fields and decodes values with ``ormsgpack``, importing LangGraph's decoder
only for a value that needs it (an extension type: a pydantic model, a datetime, ...).
"""

from __future__ import annotations

import builtins
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from longtask.checkpointers._maps import apply, copy_maps, decode

if TYPE_CHECKING:
    from longtask.checkpointers._saver_sql import Backend

#: how many (thread, namespace) heads keep their maps in memory for the next delta
_CACHE = 512
#: serialised channel values kept in memory (bytes, and the largest value kept)
_VALUES_CACHE = 64 * 1024 * 1024
_VALUE_CACHED_UP_TO = 1024 * 1024

#: decoded checkpoint states kept in memory, and how many of them may be snapshots
_STATES_CACHE = 4096
_SNAPSHOTS_CACHE = 16

#: the task id LangGraph gives writes that belong to no task: a state update's, waiting in a
#: checkpoint's pending writes until the next step applies them (its ``NULL_TASK_ID``,
#: private since 1.0)
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"


def values_now(tup: Any, prefix: str) -> dict[str, Any]:
    """The values of ``tup``'s channels starting with ``prefix`` as LangGraph's
    ``get_state`` shows them: with the state updates still waiting in the checkpoint's
    pending writes applied (``resume --update`` on a paused thread is stored so, and
    LangGraph applies it only when the thread moves on)."""
    if tup is None:
        return {}
    values = {k: v for k, v in tup.checkpoint["channel_values"].items() if k.startswith(prefix)}
    for task_id, channel, value in tup.pending_writes or ():
        if task_id == NULL_TASK_ID and channel.startswith(prefix):
            values[channel] = value
    return values


ValueKey = tuple[str, str, str, str]  # thread, namespace, channel, version
#: cached for a version whose channel had no value (LangGraph's trigger channels): the
#: checkpoint naming a version commits with its value rows, so none can appear later
_ABSENT: tuple[str, bytes] = ("", b"")


def version_key(version: Any) -> str:
    """The stored form of a channel version (the key of a value row)."""
    return version if isinstance(version, str) else repr(version)


class _Head:
    """The maps of the checkpoint a (thread, namespace) last read or wrote: the next
    checkpoint's delta is computed against them without a read. ``updated``: the channels
    it updated, whose nodes are the ones that run next (a hint for the delta)."""

    __slots__ = ("base_id", "checkpoint_id", "cv", "depth", "updated", "vs")

    def __init__(
        self, checkpoint_id: str, cv: Any, vs: Any, base_id: str, depth: int, updated: Any
    ) -> None:
        self.checkpoint_id = checkpoint_id
        self.cv = cv
        self.vs = vs
        self.base_id = base_id
        self.depth = depth
        self.updated = updated


class CheckpointRead(NamedTuple):
    """A checkpoint as a bare reader gives it: the fields of LangGraph's
    ``CheckpointTuple``, in its order."""

    config: dict[str, Any]
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    parent_config: dict[str, Any] | None = None
    pending_writes: builtins.list[tuple[str, str, Any]] | None = None


#: LangGraph's msgpack extension code for an object rebuilt from its class path and keyword
#: arguments (a dataclass such as ``Interrupt``; ``serde/jsonplus.py``)
_EXT_CONSTRUCTOR_KW_ARGS = 2


class StoredInterrupt(NamedTuple):
    """A LangGraph ``Interrupt`` read by a process without LangGraph: its ``value`` and
    ``id``, the two fields it has."""

    value: Any
    id: str


class LightSerde:
    """Decodes stored values as LangGraph's ``JsonPlusSerializer`` does; the serializer
    itself (and LangGraph with it) is imported only for a value ormsgpack cannot decode
    alone."""

    def __init__(self) -> None:
        self._full: Any = None

    def _serializer(self) -> Any:
        if self._full is None:
            from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

            self._full = JsonPlusSerializer()
        return self._full

    def _ext(self, code: int, data: bytes) -> Any:
        if code == _EXT_CONSTRUCTOR_KW_ARGS:
            import ormsgpack

            module, name, kwargs = ormsgpack.unpackb(
                data, ext_hook=self._ext, option=ormsgpack.OPT_NON_STR_KEYS
            )
            if (module, name) == ("langgraph.types", "Interrupt") and isinstance(kwargs, dict):
                # what a paused thread's pending writes hold: read without LangGraph
                return StoredInterrupt(kwargs.get("value"), str(kwargs.get("id", "")))
        return self._serializer()._unpack_ext_hook(code, data)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_, raw = data
        if type_ == "null":
            return None
        if type_ == "bytes":
            return raw
        if type_ == "msgpack":
            import ormsgpack

            return ormsgpack.unpackb(raw, ext_hook=self._ext, option=ormsgpack.OPT_NON_STR_KEYS)
        return self._serializer().loads_typed(data)


class CheckpointReader:
    """Reads checkpoints of longtask's tables (see the module docstring)."""

    #: what a checkpoint is returned as (the saver: LangGraph's ``CheckpointTuple``)
    _tuple_type: Any = CheckpointRead
    serde: Any

    def __init__(self, backend: Backend) -> None:
        self.serde = LightSerde()
        self._init_reader(backend)

    def _init_reader(self, backend: Backend) -> None:
        self.backend = backend
        self._heads: OrderedDict[tuple[str, str], _Head] = OrderedDict()
        self._heads_lock = threading.Lock()
        # A value row never changes once stored (its version has a random part, and
        # conflicts are ignored), so the serialised values this process wrote or read are
        # kept: reading the latest checkpoint again (a resume reads it several times) then
        # fetches only the values it has not seen.
        self._values: OrderedDict[ValueKey, tuple[str, bytes]] = OrderedDict()
        self._values_bytes = 0
        # Decoded checkpoint states (version-map deltas and snapshots), by checkpoint.
        self._states: OrderedDict[tuple[str, str, str], tuple[str | None, dict[str, Any]]] = (
            OrderedDict()
        )
        self._snapshots: builtins.list[tuple[str, str, str]] = []

    def _release(self, thread_id: str | None) -> None:
        """Commit what this process holds for a thread before it is read (a reader holds
        nothing; the saver overrides it)."""

    # -- reading -----------------------------------------------------------------------------

    def get_tuple(self, config: Any) -> Any:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = str(conf.get("checkpoint_ns", ""))
        self._release(thread_id)
        rows = self.backend.checkpoint_rows(thread_id, ns, conf.get("checkpoint_id"), None, 1)
        if not rows:
            return None
        tup = self._tuples(rows)[0]
        head = tup.checkpoint
        # The next put (a run continuing from here) computes its delta against these maps.
        self._remember(
            (thread_id, ns),
            head["id"],
            copy_maps(head["channel_versions"], head["versions_seen"]),
            rows[0][4],
            rows[0][5],
            head.get("updated_channels"),
        )
        return tup

    def list_light(
        self, thread_id: str, *, before: str | None = None, limit: int = 20, ns: str = ""
    ) -> builtins.list[Any]:
        """The latest ``limit`` root checkpoints of a thread (older than ``before``), with
        their channel versions and metadata but without channel values, pending writes or
        ``versions_seen`` (left empty): what history views need, read without the values'
        bytes and without copying a map per node and checkpoint. ``ns``: those of a
        subgraph's namespace instead (a graph step's own checkpoints)."""
        rows = self.backend.checkpoint_rows(thread_id, ns, None, before, limit)
        return self._tuples(rows, values=False, writes=False, seen=False)

    def head(
        self,
        thread_id: str,
        *,
        load: str | None = None,
        search: tuple[str, bytes] | None = None,
    ) -> Any:
        """The thread's latest root checkpoint, with its pending writes but only some channel
        values: those of the channels whose name starts with ``load``, and, of the channels
        starting with ``search[0]``, those whose stored bytes contain ``search[1]``. What
        the Runner's status and bookkeeping need, without reading every result of a long
        thread. ``versions_seen`` is left empty."""
        self._release(thread_id)
        rows = self.backend.checkpoint_rows(thread_id, "", None, None, 1)
        if not rows:
            return None
        tup = self._tuples(rows, values=False, seen=False)[0]
        if load is None and search is None:
            return tup
        cv = tup.checkpoint["channel_versions"]
        wanted = {(c, version_key(v)) for c, v in cv.items() if load and c.startswith(load)}
        stored = self._stored_values(thread_id, "", wanted) if wanted else {}
        if search is not None:
            # The server finds the few marked values (through a partial index, see the
            # schema's longtask_cp_values_marked); those this checkpoint holds are kept.
            prefix, needle = search
            for (c, v), value in self.backend.values_containing(thread_id, "", needle).items():
                if c.startswith(prefix) and c in cv and version_key(cv[c]) == v:
                    stored[(c, v)] = value
        tup.checkpoint["channel_values"] = {
            pair[0]: self.serde.loads_typed(value) for pair, value in stored.items()
        }
        return tup

    def _tuples(
        self,
        rows: Sequence[tuple[Any, ...]],
        *,
        values: bool = True,
        writes: bool = True,
        seen: bool = True,
    ) -> builtins.list[Any]:
        """Checkpoint tuples for rows of ``longtask_cp_checkpoints`` (see ``checkpoint_rows``
        for the columns): maps rebuilt from their snapshots, values and writes read in one
        query each. Without ``values`` the channel values are left empty, without ``writes``
        the pending writes, without ``seen`` ``versions_seen``."""
        maps = self._maps_of(rows, seen=seen)
        by_scope: dict[tuple[str, str], dict[tuple[str, str], tuple[str, bytes]]] = {}
        if values:
            pairs: dict[tuple[str, str], set[tuple[str, str]]] = {}
            for r in rows:
                cv = maps[(r[0], r[1], r[2])][0]
                pairs.setdefault((r[0], r[1]), set()).update(
                    (c, version_key(v)) for c, v in cv.items()
                )
            for scope, want in pairs.items():
                by_scope[scope] = self._stored_values(scope[0], scope[1], want)
        stored_writes = self.backend.writes([(r[0], r[1], r[2]) for r in rows]) if writes else {}
        out = []
        for r in rows:
            thread_id, ns, checkpoint_id, parent_id = r[0], r[1], r[2], r[3]
            cv, vs, state = maps[(thread_id, ns, checkpoint_id)]
            stored = by_scope.get((thread_id, ns), {})
            channel_values = {}
            for channel, version in cv.items() if values else ():
                found = stored.get((channel, version_key(version)))
                if found is not None:
                    channel_values[channel] = self.serde.loads_typed(found)
            checkpoint: dict[str, Any] = {
                "v": state.get("v", 1),
                "id": checkpoint_id,
                "ts": state.get("t", ""),
                "channel_values": channel_values,
                "channel_versions": cv,
                "versions_seen": vs,
                "updated_channels": state.get("u"),
            }
            if "x" in state:
                checkpoint.update(self.serde.loads_typed(tuple(state["x"])))
            elif checkpoint["v"] < 4:
                checkpoint["pending_sends"] = []
            out.append(
                self._tuple_type(
                    config={
                        "configurable": {
                            "thread_id": thread_id,
                            "checkpoint_ns": ns,
                            "checkpoint_id": checkpoint_id,
                        }
                    },
                    checkpoint=checkpoint,
                    metadata=json.loads(r[7]),
                    parent_config=(
                        {
                            "configurable": {
                                "thread_id": thread_id,
                                "checkpoint_ns": ns,
                                "checkpoint_id": parent_id,
                            }
                        }
                        if parent_id
                        else None
                    ),
                    pending_writes=[
                        (task_id, channel, self.serde.loads_typed((type_, blob)))
                        for task_id, channel, type_, blob in stored_writes.get(
                            (thread_id, ns, checkpoint_id), ()
                        )
                    ],
                )
            )
        return out

    def _maps_of(
        self, rows: Sequence[tuple[Any, ...]], seen: bool = True
    ) -> dict[tuple[str, str, str], tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
        """(channel_versions, versions_seen, decoded state) of each row, each its own copy
        (``seen=False``: versions_seen left empty)."""
        Key = tuple[str, str, str]
        # The head a (thread, namespace) last wrote or read has its maps in memory: the
        # latest checkpoint, read again and again while a run resumes, needs no chain read.
        cached: dict[Key, tuple[dict[str, Any], dict[str, Any]]] = {}
        with self._heads_lock:
            for r in rows:
                head = self._heads.get((r[0], r[1]))
                if head is not None and head.checkpoint_id == r[2]:
                    cached[(r[0], r[1], r[2])] = (
                        copy_maps(head.cv, head.vs) if seen else (dict(head.cv), {})
                    )
        known: dict[Key, tuple[str | None, dict[str, Any]]] = {}
        # a delta's line back to its snapshot: by base, the deepest and latest (by sequence
        # number) row asked for (none when the line is in memory, decoded by an earlier read)
        lines: dict[tuple[str, str, str], tuple[int, int]] = {}
        for r in rows:
            if r[5] and (r[0], r[1], r[2]) not in cached and not self._line_known(r, known):
                scope = (r[0], r[1], r[4])
                depth, upto = lines.get(scope, (0, r[8]))
                lines[scope] = (max(depth, r[5]), max(upto, r[8]))
        decoded: builtins.list[tuple[Key, tuple[str | None, dict[str, Any]]]] = []
        for (thread_id, ns, base_id), (depth, upto) in lines.items():
            for cid, parent, state in self.backend.chain(thread_id, ns, base_id, depth, upto):
                key = (thread_id, ns, cid)
                if key not in known:
                    known[key] = (parent, decode(state))
                    decoded.append((key, known[key]))
        for r in rows:
            key = (r[0], r[1], r[2])
            if key not in known:
                known[key] = (r[3], decode(r[6]))
                decoded.append((key, known[key]))
        self._keep_states(decoded)

        def build(key: Key) -> tuple[dict[str, Any], dict[str, Any]]:
            line = []
            cursor: Key | None = key
            while cursor is not None:
                parent, state = known[cursor]
                line.append(state)
                cursor = None if state["full"] or parent is None else (key[0], key[1], parent)
            # a fresh copy of the snapshot per checkpoint: the caller owns (and LangGraph
            # mutates) the maps it is given
            cv: dict[str, Any] = {}
            vs: dict[str, Any] = {}
            for state in reversed(line):
                if not seen:
                    # channel versions only: a shallow copy, and only their part of a delta
                    if state["full"]:
                        cv = dict(state.get("c", {}))
                    else:
                        for k in state.get("cx", ()):
                            cv.pop(k, None)
                        cv.update(state.get("c", {}))
                elif state["full"]:
                    cv, vs = copy_maps(state.get("c", {}), state.get("s", {}))
                else:
                    apply(cv, vs, state)
            return cv, vs

        out = {}
        for r in rows:
            key = (r[0], r[1], r[2])
            maps = cached.get(key) or build(key)
            out[key] = (*maps, known[key][1])
        return out

    def _line_known(
        self,
        row: tuple[Any, ...],
        known: dict[tuple[str, str, str], tuple[str | None, dict[str, Any]]],
    ) -> bool:
        """Whether the line of ``row`` (a delta) back to its snapshot is in memory, decoded;
        if so its states go into ``known``."""
        line: builtins.list[tuple[tuple[str, str, str], tuple[str | None, dict[str, Any]]]] = []
        parent: str | None = row[3]
        with self._heads_lock:
            while parent is not None:
                key = (row[0], row[1], parent)
                hit = self._states.get(key)
                if hit is None:
                    return False
                line.append((key, hit))
                if hit[1]["full"]:
                    known.update(line)
                    return True
                parent = hit[0]
        return False

    def _keep_states(
        self, items: Sequence[tuple[tuple[str, str, str], tuple[str | None, dict[str, Any]]]]
    ) -> None:
        """Keep decoded checkpoint states (immutable rows; read-only once decoded): history
        and status read the same lines again and again. Bounded by count, snapshots (which
        hold whole maps) by a count of their own."""
        with self._heads_lock:
            for key, entry in items:
                self._states[key] = entry
                if entry[1]["full"]:
                    self._snapshots.append(key)
            while len(self._states) > _STATES_CACHE:
                self._states.popitem(last=False)
            while len(self._snapshots) > _SNAPSHOTS_CACHE:
                self._states.pop(self._snapshots.pop(0), None)

    def _remember(
        self,
        key: tuple[str, str],
        checkpoint_id: str,
        maps: Any,
        base_id: str,
        depth: int,
        updated: Any = (),
    ) -> None:
        with self._heads_lock:
            self._heads[key] = _Head(
                checkpoint_id, maps[0], maps[1], base_id, depth, tuple(updated or ())
            )
            self._heads.move_to_end(key)
            while len(self._heads) > _CACHE:
                self._heads.popitem(last=False)

    def _cache_values(self, items: Any) -> None:
        with self._heads_lock:
            for key, value in items:
                size = len(value[1]) + 100
                if size > _VALUE_CACHED_UP_TO or key in self._values:
                    continue
                self._values[key] = value
                self._values_bytes += size
            while self._values_bytes > _VALUES_CACHE and self._values:
                _, (_, old) = self._values.popitem(last=False)
                self._values_bytes -= len(old) + 100

    def _stored_values(
        self, thread_id: str, ns: str, pairs: set[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[str, bytes]]:
        """The serialised values of these (channel, version) pairs: from memory, the rest
        in one read."""
        found: dict[tuple[str, str], tuple[str, bytes]] = {}
        known: set[tuple[str, str]] = set()
        with self._heads_lock:
            for pair in pairs:
                hit = self._values.get((thread_id, ns, *pair))
                if hit is not None:
                    known.add(pair)
                    if hit is not _ABSENT:
                        found[pair] = hit
        missing = sorted(pairs - known)
        if missing:
            read = self.backend.values(thread_id, ns, missing)
            found.update(read)
            # pairs without a row are kept as _ABSENT: asked for again, they cost nothing
            self._cache_values(
                ((thread_id, ns, *pair), read.get(pair, _ABSENT)) for pair in missing
            )
        return found
