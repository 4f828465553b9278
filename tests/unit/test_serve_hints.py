"""The commands ``longtask serve`` prints name its database (issue 29, item 2): any but the
default, a relative SQLite path made absolute (the reader's shell is elsewhere), a password
redacted, ``--db`` after the command's arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from longtask.checkpointers import DEFAULT_URL
from longtask.serve._hints import Hints


def test_the_default_database_needs_no_option() -> None:
    hints = Hints(DEFAULT_URL)
    assert hints.db_option == ""
    assert hints.cmd("longtask status T") == "longtask status T"


def test_a_relative_sqlite_path_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    hints = Hints("sqlite:///data/lt.db")
    assert hints.db_option == f"--db sqlite:///{tmp_path / 'data' / 'lt.db'}"


def test_a_password_is_redacted_and_the_option_goes_before_the_options() -> None:
    hints = Hints("postgresql://alice:s3cret@db.example:5432/prod")
    assert "s3cret" not in hints.db_option
    text = "go on with `longtask cancel T1 --by NAME`, or `longtask schedule --help`"
    assert hints.in_text(text) == (
        f"go on with `longtask cancel T1 {hints.db_option} --by NAME`, or "
        "`longtask schedule --help`"
    )
    given = "longtask status T --db sqlite:////x.db"
    assert hints.cmd(given) == given
