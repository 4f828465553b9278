"""Who acts (``--by``, ``by=``) passes one check everywhere (issue 39): ``migrate --by`` and
``cancel --by`` took newlines, control characters and 2,000 characters, recorded as given.
Every command of the CLI with a ``--by`` and every Runner method with a ``by=`` are found
by looking (a new one is covered by construction), and each refuses such a name before it
changes anything."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from longtask import InvalidInput, Runner
from longtask._runner import _Via
from longtask.runtime import load_task
from longtask.runtime._who import MAX_BY, check_by

TASK_REF = f"{Path(__file__).parents[1] / 'acceptance' / 'approval_task.py'}:task"
BAD = ["", "  ", "ali\nce", "alice\r", "a\x1b[31mred", "tab\there", "x" * (MAX_BY + 1), "é" * 2000]
GOOD = ["alice", "Ann O'Neil", "ci-bot@example.com", "名前", "x" * MAX_BY]


@pytest.mark.parametrize("by", BAD)
def test_a_name_that_cannot_be_recorded_as_one_is_refused(by: str) -> None:
    with pytest.raises(InvalidInput, match=r"who acts \(--by, by=\)"):
        check_by(by)


@pytest.mark.parametrize("by", GOOD)
def test_a_name_is_taken_as_given(by: str) -> None:
    assert check_by(by) == by


def _by_commands() -> list[tuple[list[str], Any]]:
    """Every command (and sub-command) of the CLI with a --by option (Typer's own click's
    objects, not the click package's: looked at by what they have)."""
    import longtask.cli

    found = []
    todo: list[tuple[list[str], Any]] = [
        ([], typer.main.get_command(longtask.cli.app))  # type: ignore[attr-defined]
    ]
    while todo:
        path, command = todo.pop()
        if hasattr(command, "commands"):
            todo.extend(([*path, name], sub) for name, sub in command.commands.items())
        elif any("--by" in getattr(p, "opts", ()) for p in command.params):
            found.append((path, command))
    return sorted(found, key=lambda pc: pc[0])


def test_every_by_option_of_the_cli_is_checked_before_anything_opens(tmp_path: Path) -> None:
    commands = _by_commands()
    names = {" ".join(path) for path, _ in commands}
    assert {"approve", "reject", "cancel", "migrate", "fork", "resume"} <= names, names
    import longtask.cli

    app = longtask.cli.app  # type: ignore[attr-defined]
    db = f"sqlite:///{tmp_path / 'never.db'}"
    for path, command in commands:
        # The other arguments a command needs, so only --by can be wrong.
        args = [*path]
        for param in command.params:
            if param.param_type_name == "argument" and param.required:
                args.append("x")
            elif param.param_type_name == "option" and param.required and "--by" not in param.opts:
                args += [param.opts[0], "x"]
        for by in BAD:
            got = CliRunner().invoke(app, [*args, "--by", by, "--db", db])
            assert got.exit_code == 2, (args, by, got.output)
            assert "--by" in got.output and "who acts" in got.output, (args, by, got.output)
    assert not (tmp_path / "never.db").exists()  # refused before the database is opened


def _methods_with_by() -> list[str]:
    return sorted(
        name
        for name, attr in vars(Runner).items()
        if isinstance(attr, _Via) and "by" in inspect.signature(attr.__wrapped__).parameters
    )


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    with Runner(db_url) as r:
        yield r


def test_every_by_of_the_runner_is_checked_and_changes_nothing(runner: Runner) -> None:
    methods = _methods_with_by()
    assert {"approve", "cancel", "migrate", "fork", "retry", "skip", "signal"} <= set(methods)
    runner.start(load_task(TASK_REF), {"version": "1.0.0"}, thread_id="t-by")
    before = [e.to_json() for e in runner.events("t-by")]
    status = runner.status("t-by", usage=False).model_dump()
    for name in methods:
        for by in BAD:
            with pytest.raises(InvalidInput, match=r"who acts \(--by, by=\)"):
                # by= is checked before the method's other arguments are looked at
                getattr(runner, name)("t-by", by=by)
    assert [e.to_json() for e in runner.events("t-by")] == before
    assert runner.status("t-by", usage=False).model_dump() == status
    # and a name that is one goes through
    runner.cancel("t-by", by="alice")
    cancelled = [e for e in runner.events("t-by") if e.kind == "longtask.cancelled"]
    assert cancelled and cancelled[-1].data.get("by") == "alice", cancelled
