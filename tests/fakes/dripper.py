"""An HTTP receiver that answers one byte-sized piece at a time, for ever: a slow-loris
receiver.

``Dripper()`` listens on 127.0.0.1 (``.url``). For each connection it reads the request,
then sends a status line and the start of a header, and a byte of its value every
``every`` seconds (``part="headers"``: a line may be 64 KiB long, so hours of bytes), or a
complete header block and then a body byte every ``every`` seconds (``part="body"``),
for up to ``lasts`` seconds. A client that bounds each socket read but not the attempt
never gets to the end of it. ``connected`` is set when a request has arrived; ``cut``
counts connections the client closed before the drip ended, ``finished`` those that
dripped to the end; ``requests`` keeps each request's raw bytes.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class Dripper:
    def __init__(self, every: float = 0.2, lasts: float = 120.0, part: str = "headers") -> None:
        self.every = every
        self.lasts = lasts
        self.part = part
        self.connected = threading.Event()
        self.requests: list[bytes] = []
        self.cut = 0
        self.finished = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/drip"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            request = self._read_request(conn)
            with self._lock:
                self.requests.append(request)
            self.connected.set()
            end = time.monotonic() + self.lasts
            try:
                if self.part == "headers":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Drip: ")
                    piece = b"d"
                else:
                    length = int(self.lasts / self.every) + 1
                    conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n".encode())
                    piece = b"."
                while time.monotonic() < end and not self._closed.is_set():
                    time.sleep(self.every)
                    conn.sendall(piece)
            except OSError:
                with self._lock:
                    self.cut += 1
                return
            with self._lock:
                self.finished += 1

    @staticmethod
    def _read_request(conn: socket.socket) -> bytes:
        conn.settimeout(30)
        data = b""
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return data
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                body += chunk
            data = head + b"\r\n\r\n" + body
        conn.settimeout(None)
        return data

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
