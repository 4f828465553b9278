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


_MISSING = object()


def encode_delta(
    parent_cv: Versions,
    parent_vs: Seen,
    cv: Versions,
    vs: Seen,
    extra: dict[str, Any],
    hint: Any = (),
    ran: Any = (),
) -> tuple[bytes, Versions, Seen]:
    """What changed from the parent's maps to these (entries added, changed or removed),
    and the new maps as a head keeps them: copies, whose inner maps of ``versions_seen``
    that did not change are the parent's own (no one changes them in place).

    ``hint``: the channels whose version is said to have changed (LangGraph's
    ``new_versions``); ``ran``: the nodes whose ``versions_seen`` is said to have changed
    (those the parent's updated channels trigger). Both are checked, not trusted: each
    map is compared whole with the parent's plus the hinted changes, one comparison in C,
    and only if that fails is every entry compared here. Without them a long thread's
    step costs a Python pass over every channel and every node."""
    out: dict[str, Any] = dict(extra)
    new_cv = dict(parent_cv)
    changed = {k: cv[k] for k in hint if k in cv and parent_cv.get(k, _MISSING) != cv[k]}
    new_cv.update(changed)
    if new_cv != cv:
        changed = {k: v for k, v in cv.items() if parent_cv.get(k, _MISSING) != v}
        removed = [k for k in parent_cv if k not in cv]
        if removed:
            out["cx"] = removed
        new_cv = dict(cv)
    if changed:
        out["c"] = changed
    new_vs = dict(parent_vs)
    nodes = [n for n in ran if n in vs and parent_vs.get(n) != vs[n]]
    new_vs.update((n, vs[n]) for n in nodes)
    if new_vs != vs:
        nodes = [n for n, versions in vs.items() if parent_vs.get(n) != versions]
        gone = [n for n in parent_vs if n not in vs]
        for n in gone:
            del new_vs[n]
        if gone:
            out["sx"] = gone
    seen: dict[str, dict[str, Any]] = {}
    gone_keys: dict[str, list[str]] = {}
    for node in nodes:
        versions = new_vs[node] = dict(vs[node])
        before = parent_vs.get(node)
        if before is None:
            seen[node] = versions
            continue
        diff = {k: v for k, v in versions.items() if before.get(k, _MISSING) != v}
        if diff:
            seen[node] = diff
        if len(before) + sum(1 for k in diff if k not in before) != len(versions):
            gone_keys[node] = [k for k in before if k not in versions]
    if seen:
        out["s"] = seen
    if gone_keys:
        out["sk"] = gone_keys
    return b"D" + ormsgpack.packb(out), new_cv, new_vs


def triggered(channels: Any) -> set[str]:
    """The nodes LangGraph's channels of these names trigger, read from the names
    (``branch:to:NODE``, ``join:A+B:NODE``, ``__start__``): a hint for ``encode_delta``,
    which checks it."""
    out = set()
    for ch in channels:
        if ch.startswith("branch:to:"):
            out.add(ch[10:])
        elif ch.startswith("join:"):
            out.add(ch.rpartition(":")[2])
        else:
            out.add(ch)
    return out


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
