"""The CLI's help and usage errors need no database and must not import LangGraph."""

from __future__ import annotations

import subprocess
import sys


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "longtask", *args], capture_output=True, text=True, timeout=60
    )


def test_help_lists_commands_without_importing_langgraph() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.argv=['longtask','--help']\n"
            "from longtask.cli import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\n"
            "    assert 'langgraph' not in sys.modules, 'langgraph imported by --help'\n"
            "    assert 'psycopg' not in sys.modules\n"
            "    print('OK')",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("OK")
    for command in ("run", "resume", "status", "ls", "history", "events", "db"):
        assert f"  {command} " in proc.stdout


def test_usage_errors_exit_2() -> None:
    assert _run("no-such-command").returncode == 2
    proc = _run("run")
    assert proc.returncode == 2
    assert "Missing argument" in proc.stderr


def test_bad_db_url_is_one_line_error_without_password() -> None:
    proc = _run("ls", "--db", "mysql://me:hunter2@localhost/x")
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: unsupported database URL")
    assert "hunter2" not in proc.stderr and "Traceback" not in proc.stderr
