"""A rolling deploy on PostgreSQL, as real processes: an old worker whose code has only v1 of
a task and a new one whose code has only v2, under the same task reference (``vtask:task``
from different directories on PYTHONPATH). Threads of both versions are queued; each runs
only on a worker that has its definition, and all complete. A thread waiting for the new
worker is left byte-for-byte unchanged by the old one's hand-backs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import run_cli

from longtask import Runner

VTASK = """
import os

from longtask import LongTask, Stage, function_step

VERSION = {version!r}


def _ran(ctx):
    worker = os.environ["LT_WORKER"]
    with open(os.environ["LT_VRUNS"], "a") as f:
        f.write(f"{{ctx.thread_id}} {{ctx.step}} {{VERSION}} {{worker}}\\n")
    return {{"version": VERSION, "worker": worker}}


stages = [
    Stage("one", [function_step(_ran, name="a")]),
    Stage("two", [function_step(_ran, name="b")]),
]
if VERSION == "2":
    stages.append(Stage("three", [function_step(_ran, name="c")]))  # what v2 changed
task = LongTask("vtask", version=VERSION, stages=stages)
"""

STEPS = {"1": ["a", "b"], "2": ["a", "b", "c"]}
THREADS = 3


def _until(what: str, ok: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def _load(directory: Path) -> Any:
    """The task as ``vtask:task`` names it with ``directory`` on the path (then forgotten:
    the other directory has a module of the same name)."""
    sys.path.insert(0, str(directory))
    try:
        import vtask

        return vtask.task
    finally:
        sys.path.remove(str(directory))
        sys.modules.pop("vtask", None)


def _snapshot(url: str, thread_id: str) -> dict[str, list[str]]:
    """Every row of longtask's tables that belongs to the thread."""
    with psycopg.connect(url) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.columns WHERE column_name = "
                "'thread_id' AND table_schema = 'public' AND table_name LIKE 'longtask%%' "
                "ORDER BY table_name"
            ).fetchall()
        ]
        return {
            t: sorted(
                repr(row)
                for row in conn.execute(
                    f"SELECT * FROM {t} WHERE thread_id = %s",  # type: ignore[arg-type]
                    (thread_id,),
                ).fetchall()
            )
            for t in tables
        }


@pytest.fixture
def start_worker(pg_url: str, tmp_path: Path) -> Iterator[Callable[[str, Path], Any]]:
    procs: list[subprocess.Popen[str]] = []

    def start(name: str, code: Path) -> subprocess.Popen[str]:
        log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
        path = os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH")) if p)
        proc = subprocess.Popen(
            [sys.executable, "-m", "longtask", "worker", "--stalled-after", "1.5", "--name", name],
            cwd=tmp_path,
            env={
                **os.environ,
                "LONGTASK_DB": pg_url,
                "PYTHONPATH": path,
                "LT_WORKER": name,
                "LT_VRUNS": str(tmp_path / "runs.txt"),
            },
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _serves(url: str) -> dict[str, tuple[list[str], int]]:
    cli = run_cli("workers", "--json", db=url)
    assert cli.returncode == 0, cli.stderr
    return {
        w["name"]: ([f"{s['task']} {s['version']}" for s in w["serves"]], w["handed_back"])
        for w in json.loads(cli.stdout)
    }


def test_old_and_new_workers_each_run_only_their_version(
    pg_url: str, tmp_path: Path, start_worker: Callable[[str, Path], Any]
) -> None:
    code = {}
    for version in ("1", "2"):
        code[version] = tmp_path / f"code-v{version}"
        code[version].mkdir()
        (code[version] / "vtask.py").write_text(VTASK.format(version=version))
    threads = {v: [f"t-v{v}-{i}" for i in range(THREADS)] for v in ("1", "2")}

    with Runner(pg_url) as runner:
        for version, ids in threads.items():
            task = _load(code[version])
            assert task.version == version
            for thread_id in ids:
                runner.submit(task, thread_id=thread_id, task_ref="vtask:task")
        waiting = {t: _snapshot(pg_url, t) for t in threads["2"]}

        # The old worker alone: it runs the v1 threads and hands every v2 one back.
        start_worker("old", code["1"])
        old_log = tmp_path / "old.log"
        _until(
            "the v1 threads to complete and each v2 thread to be handed back",
            lambda: (
                all(runner.status(t).status == "completed" for t in threads["1"])
                and all(
                    f"thread {t} handed back: lacks definition" in old_log.read_text()
                    for t in threads["2"]
                )
            ),
        )
        for t in threads["2"]:
            assert _snapshot(pg_url, t) == waiting[t], f"{t} was touched by the old worker"
        serves, handed_back = _serves(pg_url)["old"]
        assert serves == ["vtask 1"] and handed_back >= THREADS

        # The new worker joins; more threads of both versions come while both serve.
        start_worker("new", code["2"])
        for version, ids in threads.items():
            task = _load(code[version])
            more = [f"t-v{version}-{i}" for i in range(THREADS, 2 * THREADS)]
            for thread_id in more:
                runner.submit(task, thread_id=thread_id, task_ref="vtask:task")
            ids.extend(more)
        _until(
            "every thread to complete",
            lambda: all(
                runner.status(t).status == "completed" for ids in threads.values() for t in ids
            ),
        )

        for version, ids in threads.items():
            expected = "old" if version == "1" else "new"
            for t in ids:
                results = runner.results(t)
                assert {s: results[s] for s in STEPS[version]} == {
                    s: {"version": version, "worker": expected} for s in STEPS[version]
                }, t
                assert runner.db.store.lease_holder(t) is None  # let go
                with psycopg.connect(pg_url) as conn:
                    row = conn.execute(
                        "SELECT holder FROM longtask_leases WHERE thread_id = %s", (t,)
                    ).fetchone()
                assert row is not None and row[0] == expected, t

    runs = (tmp_path / "runs.txt").read_text().split("\n")
    ran = sorted(tuple(line.split()) for line in runs if line)
    assert ran == sorted(
        (t, step, version, "old" if version == "1" else "new")
        for version, ids in threads.items()
        for t in ids
        for step in STEPS[version]
    )  # each step once, on its own version's code: no v2 thread ever ran v1 code
    serves_now = _serves(pg_url)
    assert serves_now["old"][0] == ["vtask 1"] and serves_now["new"][0] == ["vtask 2"]
    shown = run_cli("workers", db=pg_url).stdout
    assert "serves vtask v1" in shown and "serves vtask v2" in shown
