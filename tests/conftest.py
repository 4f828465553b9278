"""Shared fixtures: every backend, a PostgreSQL database per test, the CLI in a subprocess.

PostgreSQL: ``$LONGTASK_TEST_PG`` (default ``postgresql://root@127.0.0.1:5432/test``) is the
server's maintenance database. Each test session creates a template database with every
migration applied, and each test gets a copy of it (``CREATE DATABASE ... TEMPLATE``) that
is dropped afterwards. Without a server the PostgreSQL tests are skipped, except when ``CI``
is set: there they fail, so a CI run cannot pass without them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PG_ADMIN_URL = os.environ.get("LONGTASK_TEST_PG", "postgresql://root@127.0.0.1:5432/test")
ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ["sqlite", "postgres"]


def _pg_url(dbname: str) -> str:
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    return f"{base}/{dbname}"


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """Name of a template database with longtask's and LangGraph's tables."""
    try:
        _admin("SELECT 1")
    except Exception as exc:
        message = f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {exc}"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI is set: PostgreSQL tests must run)")
        pytest.skip(message)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"lt_tmpl_{worker}_{uuid.uuid4().hex[:8]}"
    _admin(f'CREATE DATABASE "{name}"')
    from longtask.checkpointers import Database

    Database.open(_pg_url(name), upgrade=True).close()
    _admin(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false IS_TEMPLATE true')
    yield name
    _admin(f'ALTER DATABASE "{name}" WITH IS_TEMPLATE false')
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_template: str) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for one test."""
    name = f"lt_test_{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    yield _pg_url(name)
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'longtask.db'}"


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The test runs once per backend: SQLite file and PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'longtask.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def runner(db_url: str) -> Iterator[Any]:
    from longtask import Runner

    r = Runner(db_url)
    yield r
    r.close()


def run_cli(
    *args: str,
    db: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``longtask ARGS`` in a new Python process against ``db``."""
    full_env = {**os.environ, "LONGTASK_DB": db, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "longtask", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the figures tests recorded with ``record_property("figures", ...)`` (chaos
    runs): captured output of passing tests is hidden, and under xdist print() is lost."""
    lines = [
        f"{report.nodeid}: {value}"
        for report in terminalreporter.stats.get("passed", [])
        for name, value in getattr(report, "user_properties", [])
        if name == "figures"
    ]
    if lines:
        terminalreporter.section("figures")
        for line in lines:
            terminalreporter.write_line(line)
