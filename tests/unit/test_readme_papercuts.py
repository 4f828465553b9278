"""Issue 45: the README's event list names every event kind longtask records (it left out
``definition.migrated`` and ``definition.forced``), its Try-it commands carry no made-up
thread id, and the approval's ``plan=`` function is described."""

from __future__ import annotations

import re
from pathlib import Path

from longtask.store._kinds import EVENT_KINDS

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _listed_kinds() -> set[str]:
    start = README.index("Events recorded so far:")
    block = README[start : README.index("Each has an id", start)]
    kinds: set[str] = set()
    for name in re.findall(r"`([a-z_.|]+)`", block):
        first, *more = name.split("|")
        kinds.add(first)
        base = first.rsplit(".", 1)[0]
        kinds.update(f"{base}.{m}" for m in more)
    return kinds


def test_the_event_list_names_every_kind() -> None:
    assert not set(EVENT_KINDS) - _listed_kinds(), sorted(set(EVENT_KINDS) - _listed_kinds())


def test_try_it_uses_no_made_up_thread_id() -> None:
    start = README.index("## Try it")
    section = README[start : README.index("\n## ", start + 1)]
    assert "1a2b3c4d" not in section
    assert not re.search(r"longtask events migration-[0-9a-f]{8}", section), section


def test_the_approval_plan_function_is_described() -> None:
    assert "**`plan=`** is a function of the step context, `plan(ctx)`" in README
