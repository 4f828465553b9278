"""Bad input on the command line gets one clear line, a usage exit code where it is a usage
error, and leaves the database as it was (issue 15: thread ids, --input, --by, --kind)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

from longtask import InvalidInput, LongTask, Runner, Stage, function_step

TASK = """\
from longtask import LongTask, Stage, function_step


@function_step
def one(ctx):
    return {"n": 1}


task = LongTask("small", stages=[Stage("one", [one])])
"""


@pytest.fixture
def ref(tmp_path: Path) -> str:
    path = tmp_path / "small.py"
    path.write_text(TASK)
    return f"{path}:task"


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    errors = [line for line in lines if line.startswith(("error:", "Error:"))]
    assert len(errors) == 1, stderr
    return errors[0]


def _threads(db: str) -> list[str]:
    with Runner(db) as runner:
        return [t.thread_id for t in runner.threads()]


# -- thread ids -------------------------------------------------------------------------------


def test_a_thread_id_with_a_trailing_newline_is_refused(sqlite_url: str, ref: str) -> None:
    done = run_cli("run", ref, "--thread", "abc", db=sqlite_url)
    assert done.returncode == 0, done.stdout + done.stderr
    refused = run_cli("run", ref, "--thread", "abc\n", db=sqlite_url)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = _one_error_line(refused.stderr)
    assert "--thread" in line and "thread id 'abc\\n' is not allowed" in line
    assert _threads(sqlite_url) == ["abc"]


def test_an_empty_thread_id_is_refused(sqlite_url: str, ref: str) -> None:
    refused = run_cli("run", ref, "--thread", "", db=sqlite_url)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = _one_error_line(refused.stderr)
    assert "the thread id is empty" in line and "leave it out" in line
    assert _threads(sqlite_url) == []


def test_the_runner_refuses_the_same_thread_ids(sqlite_url: str) -> None:
    @function_step
    def one(ctx: object) -> int:
        return 1

    task = LongTask("small", stages=[Stage("one", [one])])
    with Runner(sqlite_url) as runner:
        for bad in ("", "abc\n", "\nabc", "a b"):
            with pytest.raises(InvalidInput):
                runner.start(task, thread_id=bad)
        assert runner.threads() == []
        assert runner.start(task).startswith("lt-")  # left out: a new random id
