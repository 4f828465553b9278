"""The version-map deltas of longtask's saver (checkpointers._maps): whatever LangGraph says
changed (the hint), a delta applied to its parent's maps gives back exactly the new maps."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from longtask.checkpointers import _maps


def _evolve(rng: random.Random, cv: dict[str, Any], vs: dict[str, dict[str, Any]]) -> Any:
    """A child of (cv, vs): some versions bumped, channels and nodes added, now and then a
    channel, a node or a seen entry removed (as a fork or update_state can)."""
    cv, vs = copy.deepcopy(cv), copy.deepcopy(vs)
    changed = set()
    for _ in range(rng.randint(0, 4)):
        ch = f"c{rng.randint(0, 60)}"
        cv[ch] = f"{rng.randint(0, 10**6):032}.{rng.random():016}"
        changed.add(ch)
    if cv and rng.random() < 0.2:
        gone = rng.choice(sorted(cv))
        del cv[gone]
        changed.discard(gone)
    for _ in range(rng.randint(0, 3)):
        node = f"n{rng.randint(0, 40)}"
        inner = vs.setdefault(node, {})
        if cv:
            ch = rng.choice(sorted(cv))
            inner[ch] = cv[ch]
    if vs and rng.random() < 0.1:
        del vs[rng.choice(sorted(vs))]
    if vs and rng.random() < 0.1:
        node = rng.choice(sorted(vs))
        if vs[node]:
            del vs[node][rng.choice(sorted(vs[node]))]
    return cv, vs, changed


def _applied(parent_cv: Any, parent_vs: Any, state: bytes) -> Any:
    cv, vs = _maps.copy_maps(parent_cv, parent_vs)
    _maps.apply(cv, vs, _maps.decode(state))
    return cv, vs


@pytest.mark.parametrize("hint_kind", ["exact", "none", "partial", "extra"])
def test_a_delta_rebuilds_the_child_whatever_the_hint(hint_kind: str) -> None:
    rng = random.Random(f"maps-{hint_kind}")
    cv: dict[str, Any] = {}
    vs: dict[str, dict[str, Any]] = {}
    for _ in range(400):
        child_cv, child_vs, changed = _evolve(rng, cv, vs)
        hint: Any = {
            "exact": changed,
            "none": (),
            "partial": set(list(changed)[:1]),
            "extra": changed | {"c999", *rng.sample(sorted(child_cv) or ["x"], 1)},
        }[hint_kind]
        kept_cv, kept_vs = copy.deepcopy(child_cv), copy.deepcopy(child_vs)
        state, new_cv, new_vs = _maps.encode_delta(cv, vs, child_cv, child_vs, {"t": 1}, hint)
        assert _applied(cv, vs, state) == (child_cv, child_vs)
        assert (new_cv, new_vs) == (child_cv, child_vs)
        assert (child_cv, child_vs) == (kept_cv, kept_vs), "the caller's maps were changed"
        # the head keeps its own maps: changing the caller's afterwards changes nothing
        child_cv["zz"] = "1"
        for inner in child_vs.values():
            inner["zz"] = "1"
        assert (new_cv, new_vs) == (kept_cv, kept_vs)
        cv, vs = new_cv, new_vs


def test_an_unchanged_checkpoint_is_an_empty_delta() -> None:
    cv = {"a": "1", "b": "2"}
    vs = {"n": {"a": "1"}}
    state, _new_cv, new_vs = _maps.encode_delta(cv, vs, dict(cv), {"n": {"a": "1"}}, {}, ["a"])
    assert _maps.decode(state) == {"full": False}
    assert new_vs["n"] is vs["n"], "an unchanged inner map is shared, not copied"
