"""Several definitions of one task: order, lookups, and what versions() refuses."""

from __future__ import annotations

import pytest

from longtask import DefinitionError, LongTask, Stage, function_step, versions
from longtask.model import version_key


def _task(version: str, name: str = "deploy") -> LongTask:
    return LongTask(name, [Stage("s", [function_step(lambda ctx: 1, name="a")])], version=version)


def test_newest_is_the_highest_version_read_as_numbers() -> None:
    v2, v10, v1 = _task("2"), _task("10"), _task("1")
    family = versions(v2, v10, v1)
    assert family.newest is v10
    assert [t.version for t in family] == ["10", "2", "1"]
    assert family.by_hash(v1.definition_hash) is v1
    assert family.by_version("2") is v2
    assert family.by_hash("nope") is None
    assert family.hashes == {v1.definition_hash, v2.definition_hash, v10.definition_hash}


def test_version_key_orders_dotted_versions() -> None:
    assert version_key("1.2") < version_key("1.10") < version_key("2")


def test_versions_reports_every_problem_at_once() -> None:
    with pytest.raises(DefinitionError) as info:
        versions(_task("1"), _task("1"), _task("2", name="other"))
    text = str(info.value)
    assert "share its name" in text
    assert "version '1' is given twice" in text
    assert len(info.value.problems) == 2
