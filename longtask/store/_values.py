"""How step results and task inputs are kept in state channels.

A value is JSON (or a pydantic model, dumped to JSON and rebuilt on the way out). Small
values are kept inline in the channel. Larger ones are written once to the content-addressed
``longtask_blobs`` table and the channel holds a short reference: a checkpoint that carries
every channel (the SQLite saver writes all channel values into every checkpoint row) then
carries ~80 bytes per finished step instead of the whole result.

The envelope kept in a channel is a plain dict, so any saver stores it as is:
``{"v": value}`` or ``{"ref": digest, "size": n}``, plus ``"model": "module:Qualname"``
when the value was a pydantic model. A map step's result is ``{"map": {...}}``: a reference
to its items' results in ``longtask_map_items``, each stored once (see ``map_envelope``).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel

from longtask.errors import InvalidInput, LongTaskError

DEFAULT_INLINE_LIMIT = 1024


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
        "map": {
            "thread": thread_id,
            "step": step,
            "digest": digest,
            "items": total,
            "collect": collect,
        }
    }


def _model_path(cls: type[BaseModel]) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _load_model(path: str) -> type[BaseModel]:
    module_name, _, qualname = path.partition(":")
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise LongTaskError(
                f"cannot rebuild a stored {qualname} value: module {module_name!r} is not "
                "importable in this process (load the task that defines it first)"
            ) from exc
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

    def encode(self, value: Any, what: str = "value") -> dict[str, Any]:
        data, model = to_json_bytes(value, what)
        env: dict[str, Any]
        if len(data) <= self.inline_limit:
            env = {"v": json.loads(data)}
        else:
            digest = hashlib.sha256(data).hexdigest()[:40]
            thread_id = _node_thread() if self._defer is not None else None
            if thread_id is not None and self._defer is not None:
                self._defer(thread_id, digest, data)
                self._remember(digest, data)  # readable here before it commits
            else:
                self._blobs.put_blob(digest, data)
            env = {"ref": digest, "size": len(data)}
        if model:
            env["model"] = model
        return env

    def decode(self, env: Any, *, strict: bool = True) -> Any:
        """The value an envelope holds. With ``strict=False`` a pydantic value whose class
        cannot be imported here comes back as its JSON (for display by the CLI)."""
        if not isinstance(env, dict) or not ({"v", "ref", "map"} & env.keys()):
            # Written by hand through LangGraph's own update_state: take it as it is.
            return env
        if "map" in env:
            return self._map_value(env["map"])
        raw = self._load(env["ref"]) if "ref" in env else env["v"]
        if env.get("model"):
            try:
                model = _load_model(env["model"])
            except LongTaskError:
                if strict:
                    raise
                return raw
            return model.model_validate(raw)
        return raw

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
