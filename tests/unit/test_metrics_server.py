"""The worker's metrics server (``longtask worker --metrics-port``) without a database:
what it answers besides the stored state, and a clear error for a port that is taken."""

from __future__ import annotations

import socket

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from longtask.errors import InvalidInput
from longtask.runtime._metrics import Readiness
from longtask.runtime._metrics_http import MetricsServer


def test_serves_its_registry_ok_and_404() -> None:
    registry = CollectorRegistry()
    Counter("longtask_probe", "A counter of this test.", registry=registry).inc(3)
    # /ready is never asked here: no database behind it
    server = MetricsServer(registry, Readiness(db=None), "127.0.0.1", 0)  # type: ignore[arg-type]
    server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        text = httpx.get(f"{base}/metrics", timeout=10).text
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert families["longtask_probe"].samples[0].value == 3
        assert httpx.get(f"{base}/ok", timeout=10).json() == {"ok": True}
        missing = httpx.get(f"{base}/threads", timeout=10)
        assert missing.status_code == 404
        assert "/metrics" in missing.json()["detail"]
    finally:
        server.close()


def test_a_taken_port_is_a_clear_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        server = MetricsServer(CollectorRegistry(), Readiness(db=None), "127.0.0.1", port)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match=rf"127\.0\.0\.1:{port}.*--metrics-port"):
            server.start()
