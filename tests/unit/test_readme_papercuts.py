"""Issue 45: every event kind longtask records is described in the event reference (the
docs' list left out ``definition.migrated`` and ``definition.forced``; the reference page is
generated from these descriptions, see docs/hooks.py), the README's Try-it commands carry no
made-up thread id, and the approval's ``plan=`` function is described."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from longtask.store._kinds import EVENT_KINDS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _notes() -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return dict(hooks.EVENT_NOTES)


def test_every_event_kind_is_described() -> None:
    missing = sorted(set(EVENT_KINDS) - set(_notes()))
    assert not missing, missing
    assert {"definition.migrated", "definition.forced", "manual.update"} <= set(_notes())


def test_try_it_uses_no_made_up_thread_id() -> None:
    start = README.index("## Try it")
    section = README[start : README.index("\n## ", start + 1)]
    assert "1a2b3c4d" not in section
    assert not re.search(r"longtask events migration-[0-9a-f]{8}", section), section


def test_the_approval_plan_function_is_described() -> None:
    pauses = (ROOT / "docs" / "guide" / "pauses.md").read_text()
    assert "**`plan=`** is a function of the step context, `plan(ctx)`" in pauses
