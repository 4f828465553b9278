"""``import --as NEW_ID``: the rows of an export rewritten for another thread id.

The thread id is stored in more places than the ``thread_id`` columns, and some keys are
derived from it:

- an effect's idempotency key is a hash over (thread, step[item], name, args hash)
  (``steps._effects.effect_key``): the ledger rows get the key the renamed thread computes
  when a step runs again, so a finished effect is found and not performed a second time.
  The events and the pause requests that name a key get the new one too;
- an event's ``dedupe_key`` starts with the thread id;
- a finished map step's channel value names the thread its items are stored under
  (``{"$longtask": "map", "thread": ...}``; ``{"map": {"thread": ...}}`` from 0.1).

What cannot be rewritten safely is refused (:class:`~longtask.errors.MoveRefused`): an
effect row whose key does not come from its recorded parts (the item cannot be found), or
a map step run over the result of another map step (its run is keyed by a digest of that
result, which names the thread).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ormsgpack

from longtask.errors import MoveRefused
from longtask.steps._effects import effect_key
from longtask.store._values import TAG

if TYPE_CHECKING:
    from longtask.checkpointers import Database

Rows = list[tuple[Any, ...]]


def _refuse(old: str, new: str, why: str, copying: bool = False) -> MoveRefused:
    if copying:
        return MoveRefused(
            f"cannot copy thread {old!r}: {why}. Nothing was copied; branch it in place "
            f"instead (`longtask fork {old} CHECKPOINT --set STEP=JSON`), or move it to "
            "another database under its own id (`longtask export`, then `longtask import`)"
        )
    return MoveRefused(
        f"cannot import thread {old!r} as {new!r}: {why}. Nothing was imported; import it "
        "under its own id (without --as) into a database that does not have it"
    )


def _effect_keys(
    tables: dict[str, Rows], cols: dict[str, list[str]], old: str, new: str, copying: bool
) -> dict[str, str]:
    """Old ledger key -> the key the renamed thread derives for the same effect."""
    maps = tables["longtask_maps"]
    mc = cols["longtask_maps"]
    totals: dict[str, int] = {}
    for r in maps:
        row = dict(zip(mc, r, strict=True))
        totals[row["step"]] = max(totals.get(row["step"], 0), int(row["total"]))
    ec = cols["longtask_effects"]
    out: dict[str, str] = {}
    for r in tables["longtask_effects"]:
        row = dict(zip(ec, r, strict=True))
        key, step, name, args_hash = row["key"], row["step"], row["name"], row["args_hash"]
        items: list[int | None] = [None, *range(totals.get(step, 0))]
        for item in items:
            if effect_key(old, step, name, args_hash, item) == key:
                out[key] = effect_key(new, step, name, args_hash, item)
                break
        else:
            raise _refuse(
                old,
                new,
                copying=copying,
                why=f"the ledger key {key} of effect {name!r} (step {step!r}) is not derived from "
                "its thread, step and arguments, so the renamed thread would not find it and "
                "could perform the effect again",
            )
    return out


def _replace_in_text(text: str | None, keys: dict[str, str]) -> str | None:
    if text is None:
        return None
    for old_key, new_key in keys.items():
        if old_key in text:
            text = text.replace(old_key, new_key)
    return text


def rename(
    db: Database,
    tables: dict[str, Rows],
    cols: dict[str, list[str]],
    old: str,
    new: str,
    *,
    copying: bool = False,
) -> dict[str, Rows]:
    """An export's rows (``tables``, with each table's columns ``cols``) as rows of thread
    ``new``. ``copying``: for a copy of the thread in its own database (``copy_thread``),
    whose refusals say so."""
    map_steps = {r[cols["longtask_maps"].index("step")] for r in tables["longtask_maps"]}
    if len(map_steps) > 1:
        raise _refuse(
            old,
            new,
            copying=copying,
            why="it has runs of several map steps, and a map run is keyed by a digest of its "
            "inputs, which name the thread when one map step reads another's result",
        )
    keys = _effect_keys(tables, cols, old, new, copying)
    serde = db.saver.serde
    marker = ormsgpack.packb({"thread": old})[1:]  # the "thread": old entry of a map envelope

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            out = {k: walk(v) for k, v in value.items()}
            inner = out.get("map")
            if len(out) == 1 and isinstance(inner, dict) and inner.get("thread") == old:
                out["map"] = {**inner, "thread": new}
            if out.get(TAG) == "map" and out.get("thread") == old:
                out["thread"] = new
            if out.get("kind") == "effect" and out.get("key") in keys:
                out["key"] = keys[out["key"]]
            return out
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return tuple(walk(v) for v in value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                setattr(value, f.name, walk(getattr(value, f.name)))
            return value
        return value

    old_keys = [k.encode() for k in keys]

    def value_of(type_: str | None, raw: bytes | None) -> tuple[str | None, bytes | None]:
        if raw is None or type_ is None:
            return type_, raw
        if marker not in raw and not any(k in raw for k in old_keys):
            return type_, raw
        loaded = serde.loads_typed((type_, raw))
        new_type, new_raw = serde.dumps_typed(walk(loaded))
        if marker in new_raw:
            raise _refuse(
                old, new, "a checkpoint value names the thread in a form not known", copying
            )
        return new_type, new_raw

    out: dict[str, Rows] = {}
    for name, rows in tables.items():
        c = cols[name]
        fixes: dict[str, Callable[[Any], Any]] = {"thread_id": lambda _v: new}
        if name == "longtask_effects":
            fixes["key"] = lambda v: keys[v]
        elif name == "longtask_events":
            fixes["dedupe_key"] = lambda v: _replace_in_text(
                new + v[len(old) :] if v.startswith(old + "/") else v, keys
            )
            fixes["data"] = lambda v: _replace_in_text(v, keys)
        elif name == "longtask_threads":
            fixes["waiting"] = lambda v: _replace_in_text(v, keys)
        elif name == "longtask_cp_checkpoints":
            fixes["metadata"] = lambda v: _replace_in_text(v, keys)
        new_rows: Rows = []
        for r in rows:
            row = list(r)
            for i, col in enumerate(c):
                fix = fixes.get(col)
                if fix is not None and row[i] is not None:
                    row[i] = fix(row[i])
            if name in ("longtask_cp_values", "longtask_cp_writes"):
                ti, vi = c.index("type"), c.index("value")
                row[ti], row[vi] = value_of(row[ti], row[vi])
            new_rows.append(tuple(row))
        out[name] = new_rows
    return out
