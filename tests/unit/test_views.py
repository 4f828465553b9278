"""Read models built without validation are the same as validated ones."""

from __future__ import annotations

from typing import Any

import pytest

from longtask.runtime._views import StepState, step_layout
from longtask.store import SKIP_MARK
from longtask.store._schema import MIGRATIONS

USAGE: dict[str, Any] = {
    "tokens": 3,
    "cost": 0.5,
    "tool_calls": 1,
    "model_calls": 2,
    "wall_time": 0.25,
    "attempts": 1,
    "started_at": 1.0,
    "finished_at": 2.0,
}


@pytest.mark.parametrize("usage", [USAGE, None])
def test_a_step_state_built_unvalidated_equals_a_validated_one(usage: Any) -> None:
    fast = StepState.of("s", "st", "map", "running", usage)
    slow = StepState(name="s", stage="st", kind="map", state="running", usage=usage)
    assert fast == slow
    assert fast.model_dump_json() == slow.model_dump_json()
    assert repr(fast) == repr(slow)
    assert fast.model_fields_set == slow.model_fields_set
    fast.items_done = 2
    slow.items_done = 2
    assert fast == slow and fast.model_fields_set == slow.model_fields_set


def test_a_definition_is_flattened_once_and_in_order() -> None:
    definition = {
        "stages": [
            {"name": "a", "steps": [{"name": "x", "kind": "function", "depends_on": []}]},
            {"name": "b", "steps": [{"name": "y", "kind": "map", "depends_on": ["x"]}]},
        ]
    }
    layout = step_layout(definition)
    assert layout.steps == (("x", "a", "function", ()), ("y", "b", "map", ("x",)))
    assert step_layout(definition) is layout
    # an equal but distinct definition is laid out on its own
    assert step_layout({"stages": []}).steps == ()


def test_the_index_of_marked_values_looks_for_the_skip_mark() -> None:
    # migration 15 spells SKIP_MARK in hex; the saver's query must say the same
    statements = " ".join(MIGRATIONS[14])
    assert statements.count(SKIP_MARK.hex()) == 2
