"""The README's first Python example runs as written (on the embedded SQLite default)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_readme_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks, "README has no python example"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LONGTASK_DB", raising=False)
    # A namespace that is not an importable module: the inputs model must not need to be.
    exec(compile(blocks[0], "README.md", "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out
    assert out.startswith("completed Notes on durable agents")
    assert (tmp_path / ".longtask" / "longtask.db").exists()
