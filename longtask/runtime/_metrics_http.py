"""``longtask worker --metrics-port N``: ``/metrics``, ``/ok`` and ``/ready`` of a worker.

A small HTTP server on a thread of the worker's process (the standard library's, as
prometheus_client's own ``start_http_server`` is, but with the two health routes beside the
metrics). It holds no token: it is bound to 127.0.0.1 unless ``--metrics-host`` says
otherwise, and it shows counts by task, step and model, never a thread, input or result.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from longtask.runtime._metrics import CONTENT_TYPE, Readiness, exposition

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger("longtask.metrics")


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class MetricsServer:
    """Serves ``registry`` at ``/metrics`` and ``readiness`` at ``/ready`` on
    ``host:port`` (port 0: any free port; ``port`` is the one bound once started)."""

    def __init__(
        self, registry: CollectorRegistry, readiness: Readiness, host: str, port: int
    ) -> None:
        self.registry = registry
        self.readiness = readiness
        self.host = host
        self.port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, exposition(owner.registry), CONTENT_TYPE)
                elif path == "/ok":
                    self._json(200, {"ok": True})
                elif path == "/ready":
                    ready, checks = owner.readiness.check()
                    self._json(200 if ready else 503, {"ready": ready, "checks": checks})
                else:
                    self._json(404, {"detail": "a worker serves /metrics, /ok and /ready"})

            def _json(self, status: int, body: dict[str, Any]) -> None:
                self._send(status, json.dumps(body).encode(), "application/json")

            def _send(self, status: int, body: bytes, media_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", media_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                # every scrape would be a line of the worker's log
                log.debug("%s " + format, self.address_string(), *args)

        server_class = _Server6 if ":" in self.host else ThreadingHTTPServer
        try:
            server = server_class((self.host, self.port), Handler)
        except OSError as exc:
            from longtask.errors import InvalidInput

            raise InvalidInput(
                f"cannot serve metrics on {self.host}:{self.port}: {exc.strerror or exc}; "
                "choose another --metrics-port (0: any free port) or --metrics-host"
            ) from None
        server.daemon_threads = True
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever, name="longtask-metrics", daemon=True
        )
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics (and /ok, /ready)", self.host, self.port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
