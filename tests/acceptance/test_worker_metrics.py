"""``longtask worker --metrics-port``: a real worker process on PostgreSQL serves
``/metrics``, ``/ok`` and ``/ready`` (issue 42), and its counts of the stored state are the
ones ``longtask serve`` reports for the same database."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from longtask import Runner
from longtask.serve import create_app

HERE = Path(__file__).resolve().parent


def _until(what: str, ok: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def _parse(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


#: the stored state's series: every process reports the same values for them
SHARED = (
    "longtask_threads",
    "longtask_steps_started",
    "longtask_steps_completed",
    "longtask_pauses_waiting",
    "longtask_events_stored",
    "longtask_step_duration_seconds_count",
)


def test_a_worker_serves_metrics_and_readiness(pg_url: str, tmp_path: Path) -> None:
    log_path = tmp_path / "worker.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "longtask",
                "worker",
                "--stalled-after",
                "1.5",
                "--name",
                "metered",
                "--metrics-port",
                "0",
            ],
            env={**os.environ, "LONGTASK_DB": pg_url},
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        found: list[str] = []

        def port_logged() -> bool:
            found[:] = re.findall(
                r"metrics on http://127\.0\.0\.1:(\d+)/metrics", log_path.read_text()
            )
            assert proc.poll() is None, log_path.read_text()
            return bool(found)

        _until("the worker to log its metrics port", port_logged)
        base = f"http://127.0.0.1:{found[0]}"
        assert httpx.get(f"{base}/ok", timeout=10).json() == {"ok": True}
        ready = httpx.get(f"{base}/ready", timeout=10)
        assert ready.status_code == 200, ready.text
        assert ready.json() == {
            "ready": True,
            "checks": {"database": "ok", "schema": "ok", "queue": "ok"},
        }
        assert httpx.get(f"{base}/nothing", timeout=10).status_code == 404

        sys.path.insert(0, str(HERE))
        from worker_task import gated

        with Runner(pg_url) as runner:
            ref = f"{HERE}/worker_task.py:gated"
            threads = [
                runner.submit(gated, {"n": i}, thread_id=f"t-metered-{i}", task_ref=ref)
                for i in range(3)
            ]
            _until(
                "the threads to wait for their approvals",
                lambda: all(runner.status(t).status == "waiting_user" for t in threads),
            )

            def scraped() -> dict[str, Any]:
                r = httpx.get(f"{base}/metrics", timeout=10)
                assert r.status_code == 200
                return _parse(r.text)

            # the jobs' counts settle once the worker let go of the last thread
            _until(
                "the worker to count its jobs",
                lambda: scraped().get("longtask_worker_jobs_total", {}).get((), 0) >= 3,
            )
            m = scraped()
            jobs = m["longtask_worker_jobs_total"][()]
            assert m["longtask_queue_wait_seconds_count"][()] == jobs
            assert m["longtask_queue_wait_seconds_sum"][()] >= 0
            assert m["longtask_threads"][(("status", "waiting_user"), ("task", "gated"))] == 3
            assert m["longtask_pauses_waiting"] == {(("kind", "approval"), ("task", "gated")): 3}
            assert m["longtask_database_up"][()] == 1
            assert m["longtask_db_timeouts_total"][()] == 0

            # serve on the same database reports the same stored state (the worker's
            # snapshot may be a moment older: it is reused for a couple of seconds)
            with TestClient(create_app(runner)) as client:
                serve_view = _parse(client.get("/metrics").text)
            shared = {name: serve_view[name] for name in SHARED}
            assert shared["longtask_threads"] == m["longtask_threads"]
            _until(
                "the worker to report what serve reports",
                lambda: {name: scraped().get(name) for name in SHARED} == shared,
                timeout=30,
            )
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, log_path.read_text()
