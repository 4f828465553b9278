"""Exit codes and error output of the CLI: a failed run exits 1 with an ``error:`` message
and no traceback; ``--debug`` adds the traceback; usage errors exit 2."""

from __future__ import annotations

from pathlib import Path

from conftest import run_cli

FAILING = """\
from longtask import LongTask, Stage, function_step


@function_step
def fine(ctx):
    return 1


@function_step
def explode(ctx):
    raise ValueError("bad value " + str(ctx.result("fine") + 41))


task = LongTask("failing", stages=[Stage("one", [fine]), Stage("two", [explode])])
"""


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_failed_run_exits_1_with_a_message_and_no_traceback(
    sqlite_url: str, tmp_path: Path
) -> None:
    task_file = tmp_path / "failing.py"
    task_file.write_text(FAILING)
    ref = f"{task_file}:task"

    failed = run_cli("run", ref, "--thread", "quiet", db=sqlite_url)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "Traceback" not in failed.stderr
    assert "Traceback" not in failed.stdout
    assert _error_lines(failed.stderr) == [
        "error: step 'explode' failed: ValueError: bad value 42"
    ], failed.stderr
    assert failed.stderr.startswith("error: ")
    assert "longtask resume quiet" in failed.stderr  # how to continue

    loud = run_cli("--debug", "run", ref, "--thread", "loud", db=sqlite_url)
    assert loud.returncode == 1, loud.stdout + loud.stderr
    assert "Traceback" in loud.stderr
    assert "explode" in loud.stderr  # the failing step function is in the traceback
    assert "ValueError" in loud.stderr
    assert _error_lines(loud.stderr) == ["error: step 'explode' failed: ValueError: bad value 42"]

    # the thread is kept, failed, and its status is readable (a read command exits 0)
    status = run_cli("status", "quiet", db=sqlite_url)
    assert status.returncode == 0, status.stderr
    assert "failed" in status.stdout


def test_unknown_thread_and_usage_errors(sqlite_url: str) -> None:
    assert run_cli("db", "upgrade", db=sqlite_url).returncode == 0
    missing = run_cli("status", "no-such-thread", db=sqlite_url)
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: no thread 'no-such-thread'"), missing.stderr
    assert "Traceback" not in missing.stderr

    usage = run_cli("run", "--no-such-option", db=sqlite_url)
    assert usage.returncode == 2, usage.stdout + usage.stderr
    assert "Traceback" not in usage.stderr
