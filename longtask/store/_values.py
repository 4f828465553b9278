"""How step results and task inputs are kept in state channels.

A value is JSON (or a pydantic model, dumped to JSON and rebuilt on the way out). Small
values are kept inline in the channel. Larger ones are written once to the content-addressed
``longtask_blobs`` table and the channel holds a short reference: a checkpoint that carries
every channel (the SQLite saver writes all channel values into every checkpoint row) then
carries ~80 bytes per finished step instead of the whole result.

A channel holds the value itself, as LangGraph's own ``get_state().values`` shows it. Only
a few kinds of value are kept as a small object tagged ``"$longtask"``:

- a large value: ``{"$longtask": "blob", "digest": d, "size": n}``;
- a pydantic model (rebuilt on the way out): ``{"$longtask": "model", "model":
  "module:Qualname", "value": json}`` (a large one is a blob with ``"model"``);
- a pause's result that sends execution ahead (``"skip_to"``, ``"reason"`` beside
  ``"value"``);
- a map step's result, a reference to its items' results in ``longtask_map_items``, each
  stored once (``{"$longtask": "map", ...}``, see ``map_envelope``), and a step skipped by
  a pause (``{"$longtask": "skipped", "reason": ...}``).

A plain dict that could be read as one of those (it has a ``"$longtask"`` key, or the shape
of a 0.1 envelope) is wrapped as ``{"$longtask": "value", "value": ...}``. Databases
written before carry envelopes (``{"v": value}``, ``{"ref": digest, "size": n}``,
``{"map": {...}}``, ``{"v": null, "skipped": reason}``); they are read as before.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel

from longtask.errors import InvalidInput, LongTaskError

DEFAULT_INLINE_LIMIT = 1024

#: the key of the few objects longtask keeps in a channel in place of a plain value
TAG = "$longtask"
_LEGACY_KEYS = frozenset({"v", "ref", "size", "model", "map", "skipped", "skip_to", "reason"})


def _legacy(value: Any) -> bool:
    """An envelope written before plain values (0.1): ``{"v": ...}``, ``{"ref": ...}``..."""
    return (
        isinstance(value, dict)
        and bool(value)
        and value.keys() <= _LEGACY_KEYS
        and bool({"v", "ref", "map"} & value.keys())
    )


def skipped_value(reason: str) -> dict[str, Any]:
    """The channel value of a step a pause skipped (its result reads as None)."""
    return {TAG: "skipped", "reason": reason}


#: bytes every stored skip mark holds, whichever serializer stored it (JSON and msgpack keep a
#: string's UTF-8 as is): the server finds the few candidates among a thread's results
SKIP_MARK = b"skipped"


def is_skipped(value: Any) -> bool:
    """Whether a channel value marks a step skipped by a pause."""
    if not isinstance(value, dict):
        return False
    if TAG in value:
        return bool(value[TAG] == "skipped")
    return _legacy(value) and bool(value.get("skipped"))


def sending_ahead(value: Any, target: str, reason: str) -> dict[str, Any]:
    """A pause's result (a channel value) that also sends execution ahead to ``target``:
    the steps that are not on the way there are skipped (see longtask.steps._pause)."""
    env = (
        dict(value) if isinstance(value, dict) and TAG in value else {TAG: "value", "value": value}
    )
    env.update(skip_to=target, reason=reason)
    return env


def is_reference(value: Any) -> bool:
    """Whether a channel value is a stored object of longtask's (a blob, a model, a map)
    rather than a plain JSON value."""
    return isinstance(value, dict) and (TAG in value or _legacy(value))


class BlobStore(Protocol):
    def put_blob(self, digest: str, data: bytes) -> None: ...
    def get_blob(self, digest: str) -> bytes | None: ...


class MapResults(Protocol):
    def map_result(self, thread_id: str, step: str, digest: str, collect: bool) -> bytes: ...


def map_envelope(
    thread_id: str, step: str, digest: str, total: int, collect: bool
) -> dict[str, Any]:
    """The channel value of a finished map step: where its items' results are stored."""
    return {
        TAG: "map",
        "thread": thread_id,
        "step": step,
        "digest": digest,
        "items": total,
        "collect": collect,
    }


def _model_path(cls: type[BaseModel]) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _load_model(path: str) -> type[BaseModel]:
    module_name, _, qualname = path.partition(":")
    # Never import what the database names: a value written through the raw graph's
    # update_state could name any module, and importing it runs its code. The task's
    # definition (and what it imports) is loaded before its values are read.
    module = sys.modules.get(module_name)
    if module is None:
        raise LongTaskError(
            f"cannot rebuild a stored {qualname} value: module {module_name!r} is not loaded "
            "in this process (load the task that defines it first)"
        )
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not (isinstance(obj, type) and issubclass(obj, BaseModel)):
        raise LongTaskError(f"cannot rebuild a stored value: {path} is not a pydantic model")
    return obj


def to_json_bytes(value: Any, what: str) -> tuple[bytes, str | None]:
    """Serialise a value; returns the JSON bytes and the model path if it was a model."""
    model = None
    if isinstance(value, BaseModel):
        model = _model_path(type(value))
        value = value.model_dump(mode="json")
    try:
        data = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            f"{what} is not JSON-serialisable ({exc}); return JSON types (dict, list, str, "
            "int, float, bool, None) or a pydantic model"
        ) from exc
    return data.encode(), model


class ValueCodec:
    """Encodes values into channel envelopes and back, with a small read cache."""

    def __init__(
        self,
        blobs: BlobStore,
        inline_limit: int = DEFAULT_INLINE_LIMIT,
        defer: Callable[[str, str, bytes], None] | None = None,
        maps: MapResults | None = None,
    ) -> None:
        self._blobs = blobs
        self._maps = maps
        self.inline_limit = inline_limit
        #: ``defer(thread_id, digest, data)``: inside a graph node, a blob is handed over to
        #: be inserted by the transaction that stores the node's writes (which refer to it)
        #: instead of costing a commit of its own
        self._defer = defer
        self._cache: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def encode(self, value: Any, what: str = "value", *, thread_id: str | None = None) -> Any:
        """The channel value of ``value``: the JSON value itself, or a tagged object (see
        the module's doc). A large value's blob is handed to the transaction of the thread's
        next checkpoint when inside one of its nodes, or when ``thread_id`` names the thread
        whose state write is about to carry it (a refused write then stores nothing)."""
        data, model = to_json_bytes(value, what)
        if len(data) > self.inline_limit:
            digest = hashlib.sha256(data).hexdigest()[:40]
            if thread_id is None and self._defer is not None:
                thread_id = _node_thread()
            if thread_id is not None and self._defer is not None:
                self._defer(thread_id, digest, data)
                self._remember(digest, data)  # readable here before it commits
            else:
                self._blobs.put_blob(digest, data)
            env: dict[str, Any] = {TAG: "blob", "digest": digest, "size": len(data)}
            if model:
                env["model"] = model
            return env
        plain = json.loads(data)
        if model:
            return {TAG: "model", "model": model, "value": plain}
        if isinstance(plain, dict) and (TAG in plain or _legacy(plain)):
            return {TAG: "value", "value": plain}
        return plain

    def decode(self, env: Any, *, strict: bool = True) -> Any:
        """The value a channel holds. With ``strict=False`` a pydantic value whose class
        cannot be imported here comes back as its JSON (for display by the CLI)."""
        if not isinstance(env, dict):
            return env
        if TAG in env:
            kind = env[TAG]
            if kind == "value":
                return env["value"]
            if kind == "skipped":
                return None
            if kind == "map":
                return self._map_value(env)
            if kind == "blob":
                raw = self._load(env["digest"])
            elif kind == "model":
                raw = env["value"]
            else:
                raise LongTaskError(
                    f"a stored value has an unknown kind {kind!r}: it was written by a newer "
                    "longtask; upgrade longtask to read it"
                )
            return self._rebuild(raw, env.get("model"), strict)
        if not _legacy(env):
            return env  # a plain value (or one written through LangGraph's update_state)
        if "map" in env:
            return self._map_value(env["map"])
        raw = self._load(env["ref"]) if "ref" in env else env["v"]
        return self._rebuild(raw, env.get("model"), strict)

    @staticmethod
    def _rebuild(raw: Any, model_path: str | None, strict: bool) -> Any:
        if not model_path:
            return raw
        try:
            model = _load_model(model_path)
        except LongTaskError:
            if strict:
                raise
            return raw
        return model.model_validate(raw)

    def _map_value(self, ref: dict[str, Any]) -> Any:
        if self._maps is None:
            raise LongTaskError("a map step's result can be read only through a Runner")
        key = f"map\x1f{ref['thread']}\x1f{ref['step']}\x1f{ref['digest']}"
        with self._lock:
            data = self._cache.get(key)
        if data is None:
            # A finished map's item outcomes no longer change: cache the assembled bytes.
            data = self._maps.map_result(
                ref["thread"], ref["step"], ref["digest"], bool(ref.get("collect"))
            )
            with self._lock:
                if len(self._cache) > 256:
                    self._cache.clear()
                self._cache[key] = data
        return json.loads(data)

    def _load(self, digest: str) -> Any:
        # Cache bytes, not objects: each reader gets its own copy to mutate.
        with self._lock:
            data = self._cache.get(digest)
        if data is None:
            data = self._blobs.get_blob(digest)
            if data is None:
                raise LongTaskError(f"stored value {digest} is missing from longtask_blobs")
            self._remember(digest, data)
        return json.loads(data)

    def _remember(self, digest: str, data: bytes) -> None:
        with self._lock:
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[digest] = data


def _node_thread() -> str | None:
    """The thread of the graph node running in this context, if any."""
    from langgraph.config import get_config

    try:
        thread_id = get_config().get("configurable", {}).get("thread_id")
    except RuntimeError:  # not inside a node
        return None
    return str(thread_id) if thread_id is not None else None
