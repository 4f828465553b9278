"""A TCP proxy in the test's process that can stop forwarding: a frozen network path.

``TcpProxy(upstream_host, upstream_port)`` listens on 127.0.0.1 (``.port``) and pipes every
connection to the upstream server. ``freeze()`` stops moving bytes either way, on open
connections and new ones alike, without closing anything: the sockets stay up and the
kernel keeps acknowledging what the client sends, so TCP alone (keepalives, a user timeout)
never notices — exactly the hang of a stuck middlebox or a frozen server. ``thaw()`` lets
bytes through again; ``cut()`` closes every open connection (a dropped link); ``stop()``
also closes the listening socket, so new connections are refused (a stopped server).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from typing import Any


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._moving = threading.Event()
        self._moving.set()
        self._closed = False
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self.connections = 0
        self._accepter = threading.Thread(target=self._accept, daemon=True, name="tcp-proxy")
        self._accepter.start()

    def url(self, pg_url: str) -> str:
        """``pg_url`` with its host and port replaced by this proxy's."""
        scheme, _, rest = pg_url.partition("://")
        auth, _, path = rest.partition("/")
        user = auth.rpartition("@")[0]
        return f"{scheme}://{user + '@' if user else ''}127.0.0.1:{self.port}/{path}"

    def freeze(self) -> None:
        self._moving.clear()

    def thaw(self) -> None:
        self._moving.set()

    @property
    def frozen(self) -> bool:
        return not self._moving.is_set()

    def cut(self) -> None:
        """Close every open connection (both sides)."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()

    def stop(self) -> None:
        """Refuse new connections and close the open ones, as a stopped server does."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()

    def close(self) -> None:
        self._closed = True
        self._moving.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        # a new connection while frozen is accepted, and then hears nothing
        self._moving.wait()
        try:
            server = socket.create_connection(self.upstream, timeout=10)
            server.settimeout(None)
        except OSError:
            client.close()
            return
        with self._lock:
            self._pairs.append((client, server))
            self.connections += 1
        ends = {client: server, server: client}
        try:
            while not self._closed:
                readable, _, _ = select.select(list(ends), [], [], 0.1)
                if not self._moving.is_set():
                    # frozen: read nothing (the kernel buffers and acknowledges), send nothing
                    continue
                for src in readable:
                    data = src.recv(65536)
                    if not data:
                        return
                    ends[src].sendall(data)
        except OSError:
            return
        finally:
            for s in (client, server):
                with contextlib.suppress(OSError):
                    s.close()
