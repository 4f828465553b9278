"""A checkpoint's version maps, stored as what changed since its parent.

LangGraph's checkpoint carries ``channel_versions`` (one entry per channel ever written) and
``versions_seen`` (one map per node that ever ran). Both grow with the number of steps, so
storing them whole in every checkpoint makes a thread's bytes grow with the square of its
length. A row stores instead the entries that changed since its parent (a *delta*), and
every ``FULL_EVERY`` rows along a line a full copy (a *snapshot*), so that reading any
checkpoint applies at most ``FULL_EVERY - 1`` deltas to one snapshot.

Snapshots are compressed: version strings repeat their zero padding and channel names repeat
node names.
"""

from __future__ import annotations

import zlib
from typing import Any

import ormsgpack

#: a snapshot every this many checkpoints along a line (bounds the deltas a read applies)
FULL_EVERY = 64
_ZIP_OVER = 512

Versions = dict[str, Any]
Seen = dict[str, dict[str, Any]]


def encode_full(cv: Versions, vs: Seen, extra: dict[str, Any]) -> bytes:
    body = ormsgpack.packb({"c": cv, "s": vs, **extra})
    if len(body) > _ZIP_OVER:
        return b"Z" + zlib.compress(body, 1)
    return b"F" + body


def encode_delta(
    parent_cv: Versions, parent_vs: Seen, cv: Versions, vs: Seen, extra: dict[str, Any]
) -> bytes:
    """What changed from the parent's maps to these (entries added, changed or removed)."""
    out: dict[str, Any] = dict(extra)
    changed = {k: v for k, v in cv.items() if k not in parent_cv or parent_cv[k] != v}
    if changed:
        out["c"] = changed
    if len(parent_cv) + sum(1 for k in changed if k not in parent_cv) != len(cv):
        out["cx"] = [k for k in parent_cv if k not in cv]
    seen: dict[str, dict[str, Any]] = {}
    gone_keys: dict[str, list[str]] = {}
    for node, versions in vs.items():
        before = parent_vs.get(node)
        if before is None:
            seen[node] = versions
            continue
        if before == versions:
            continue
        diff = {k: v for k, v in versions.items() if k not in before or before[k] != v}
        if diff:
            seen[node] = diff
        if len(before) + sum(1 for k in diff if k not in before) != len(versions):
            gone_keys[node] = [k for k in before if k not in versions]
    if seen:
        out["s"] = seen
    if gone_keys:
        out["sk"] = gone_keys
    if len(parent_vs) + sum(1 for n in vs if n not in parent_vs) != len(vs):
        out["sx"] = [n for n in parent_vs if n not in vs]
    return b"D" + ormsgpack.packb(out)


def decode(state: bytes) -> dict[str, Any]:
    """The stored dict; ``full`` says whether it is a snapshot."""
    kind, body = state[:1], state[1:]
    if kind == b"Z":
        body = zlib.decompress(body)
    out: dict[str, Any] = ormsgpack.unpackb(body)
    out["full"] = kind != b"D"
    return out


def apply(cv: Versions, vs: Seen, delta: dict[str, Any]) -> None:
    """Apply a decoded delta to (copies of) the parent's maps, in place."""
    for k in delta.get("cx", ()):
        cv.pop(k, None)
    cv.update(delta.get("c", {}))
    for node in delta.get("sx", ()):
        vs.pop(node, None)
    for node, keys in delta.get("sk", {}).items():
        inner = vs.get(node)
        if inner is not None:
            for k in keys:
                inner.pop(k, None)
    for node, versions in delta.get("s", {}).items():
        inner = vs.get(node)
        if inner is None:
            vs[node] = dict(versions)
        else:
            inner.update(versions)


def copy_maps(cv: Versions, vs: Seen) -> tuple[Versions, Seen]:
    return dict(cv), {node: dict(v) for node, v in vs.items()}
