"""The canonical encoding that effect keys hash: one form per value in every process, tagged
where JSON alone would mix two values up, and a clear refusal where no stable form exists."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import os
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path, PurePosixPath

import pytest
from pydantic import BaseModel

from longtask.errors import InvalidInput
from longtask.model._canonical import NotCanonical, canonical, canonical_digest, canonical_json


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Model(BaseModel):
    name: str
    tags: set[str]
    when: dt.date


@dataclasses.dataclass
class Point:
    x: int
    y: int


def test_plain_json_keeps_its_old_encoding() -> None:
    # A thread upgraded mid-run finds the ledger rows its arguments were keyed by before.
    value = [[1, 2.5, "é", None, True], {"b": [1], "a": {"z": 1, "y": 2}}]
    assert canonical_json(value) == json.dumps(value, sort_keys=True, default=str)


def test_dicts_and_sets_do_not_depend_on_order() -> None:
    assert canonical_json({"a": 1, "b": 2}) == canonical_json({"b": 2, "a": 1})
    assert canonical_json({"x", "y", "z"}) == canonical_json({"z", "y", "x"})
    assert canonical_json(frozenset({1, 2})) == canonical_json({2, 1})
    assert canonical({3, 1, 2}) == {"$set": [1, 2, 3]}
    # members sorted by their own encoding, whatever their types
    assert canonical({("a", 1), ("b", 0)}) == {"$set": [["a", 1], ["b", 0]]}


def test_sets_hash_the_same_under_every_hash_seed() -> None:
    code = (
        "from longtask.model._canonical import canonical_digest;"
        "print(canonical_digest([{f's{i}' for i in range(40)}, {'k': frozenset('abcdef')}]))"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1


def test_tagged_values_stay_apart() -> None:
    assert canonical(b"hi") == {"$bytes": "aGk="}
    assert canonical_json(b"hi") != canonical_json("hi")
    assert canonical_json(bytearray(b"hi")) == canonical_json(b"hi")
    assert canonical(dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)) == {
        "$datetime": "2026-01-02T03:04:05+00:00"
    }
    assert canonical(dt.date(2026, 1, 2)) == {"$date": "2026-01-02"}
    assert canonical(dt.time(3, 4)) == {"$time": "03:04:00"}
    assert canonical(Decimal("1.50")) == canonical(Decimal("1.5")) == {"$decimal": "1.5"}
    u = uuid.UUID(int=7)
    assert canonical(u) == {"$uuid": str(u)}
    assert canonical_json(u) != canonical_json(str(u))
    assert canonical(PurePosixPath("a/b")) == canonical(Path("a/b")) == {"$path": "a/b"}
    assert canonical(Color.RED) == {"$enum": [f"{__name__}:Color", "red"]}
    assert canonical(Level.HIGH) == {"$enum": [f"{__name__}:Level", 3]}
    assert canonical_json(Color.RED) != canonical_json("red")
    assert canonical((1, (2, 3))) == [1, [2, 3]]
    # a plain dict cannot pose as a tagged value
    assert canonical({"$bytes": "aGk="}) == {"$dict": {"$bytes": "aGk="}}
    assert canonical_json({"$bytes": "aGk="}) != canonical_json(b"hi")


def test_models_and_dataclasses_are_dumped() -> None:
    m = Model(name="n", tags={"b", "a"}, when=dt.date(2026, 1, 2))
    assert canonical(m) == {
        "name": "n",
        "tags": {"$set": ["a", "b"]},
        "when": {"$date": "2026-01-02"},
    }
    assert canonical(Point(1, 2)) == {"x": 1, "y": 2}
    assert canonical_digest(Point(1, 2)) == canonical_digest({"y": 2, "x": 1})


@pytest.mark.parametrize(
    "value",
    [object(), lambda: 1, iter([1]), {(1, 2): "tuple key"}, {1: "a", "1": "b"}],
    ids=["object", "function", "iterator", "tuple-key", "colliding-keys"],
)
def test_values_without_a_stable_form_are_refused(value: object) -> None:
    with pytest.raises(NotCanonical) as info:
        canonical_digest({"arg": value}, "an argument of effect 'x'")
    assert isinstance(info.value, InvalidInput)
    message = str(info.value)
    assert message.startswith("an argument of effect 'x' ") and "\n" not in message
    assert "0x" not in message  # no memory address


def test_a_self_referencing_value_is_refused() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(NotCanonical, match="nested more than"):
        canonical(loop)
