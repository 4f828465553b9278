"""``longtask serve`` cuts off clients that hold connections open (issue 28, item 10): a
head trickled a byte at a time, a connection that never sends, an idle keep-alive, and a
head over the size bound. A real ``serve`` process, spoken to over raw sockets; each check
waits for the close up to the bound plus a few seconds, and fails if it never comes."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from longtask.serve._limits import HEADER_TIMEOUT, KEEP_ALIVE_TIMEOUT, MAX_HEAD_BYTES

#: how long past a bound a test waits for the close before it fails
SLACK = 5.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    db = f"sqlite:///{tmp_path_factory.mktemp('limits') / 'lt.db'}"
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "longtask", "serve", "--port", str(port), "--db", db],
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"longtask serve exited with {proc.returncode}: {proc.stdout.read()}")  # type: ignore[union-attr]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ok", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "longtask serve did not answer within 30 s"
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _until_closed(sock: socket.socket, within: float, trickle: bytes = b"") -> bytes:
    """What the server sent before it closed ``sock``, waiting at most ``within`` seconds
    (sending ``trickle`` a byte every half second meanwhile); fails if it stays open."""
    got = b""
    deadline = time.monotonic() + within
    sent = 0
    while time.monotonic() < deadline:
        readable, _, _ = select.select([sock], [], [], 0.5)
        if readable:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return got
            if not chunk:
                return got
            got += chunk
        elif trickle:
            try:
                sock.sendall(trickle[sent % len(trickle) : sent % len(trickle) + 1])
            except (BrokenPipeError, ConnectionResetError):
                return got
            sent += 1
    pytest.fail(f"the server kept the connection open for {within:g} s (it sent {got[:200]!r})")


def _response(sock: socket.socket) -> bytes:
    """One whole response (its head and its content-length body) read from ``sock``."""
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a whole response: {got!r}"
        got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, f"closed before the body's end: {got!r}"
        body += chunk
    return head + b"\r\n\r\n" + body


def _get(extra: bytes = b"") -> bytes:
    return b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra + b"\r\n"


def test_a_head_sent_slowly_is_cut_off(port: int) -> None:
    with _connect(port) as sock:
        sock.sendall(b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        # a byte every half second, forever: each one used to keep the connection alive
        got = _until_closed(sock, HEADER_TIMEOUT + SLACK, trickle=b"X-Slow: yes\r\n")
    assert got.startswith(b"HTTP/1.1 408 "), got
    assert b"within 10 s" in got


def test_a_connection_that_never_sends_is_closed(port: int) -> None:
    with _connect(port) as sock:
        assert _until_closed(sock, HEADER_TIMEOUT + SLACK) == b""


def test_an_idle_keep_alive_connection_is_closed(port: int) -> None:
    with _connect(port) as sock:
        # kept alive between requests...
        for _ in range(2):
            sock.sendall(_get())
            assert _response(sock).startswith(b"HTTP/1.1 200 ")
        # ... and closed once idle
        assert _until_closed(sock, KEEP_ALIVE_TIMEOUT + SLACK) == b""


@pytest.mark.parametrize("pieces", [1, 25], ids=["in-one-write", "in-pieces"])
def test_a_100_kb_header_is_refused(port: int, pieces: int) -> None:
    request = _get(b"X-Big: " + b"a" * 100_000 + b"\r\n")
    with _connect(port) as sock:
        step = -(-len(request) // pieces)
        try:
            for at in range(0, len(request), step):
                sock.sendall(request[at : at + step])
                if pieces > 1:
                    time.sleep(0.02)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the rest arrived
        got = _until_closed(sock, SLACK)
    assert got == b"" or got.startswith(b"HTTP/1.1 431 "), got[:300]
    assert b"200 OK" not in got


def test_a_head_within_the_bound_is_served(port: int) -> None:
    with _connect(port) as sock:
        sock.sendall(_get(b"X-Big: " + b"a" * (MAX_HEAD_BYTES - 1000) + b"\r\n"))
        assert _response(sock).startswith(b"HTTP/1.1 200 ")
