"""Bounds on what a client may hold open: how long a request's head may take, how large it
may be, and how long a connection may sit idle.

uvicorn bounds only the idle time after a response (``timeout_keep_alive``) and the size of
a head still arriving (h11's ``max_incomplete_event_size``). A client that trickles its
headers a byte at a time restarts neither, a connection that never sends a byte is never
timed out, and a head that arrives whole is never measured; hundreds of such clients hold
the server's sockets for as long as they like. ``BoundedH11Protocol`` adds a deadline for
each request's head (from the connection's first moment, or from a keep-alive request's
first byte), and ``bounded_heads`` refuses a complete head over the size limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

#: seconds a client has to send a request's whole head (request line and headers)
HEADER_TIMEOUT = 10.0
#: seconds a connection may sit idle between a response and the next request
KEEP_ALIVE_TIMEOUT = 5
#: bytes a request's head may take: request line and headers together
MAX_HEAD_BYTES = 32 * 1024

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_TOO_LARGE = (
    f"request header fields too large: a request's line and headers may take "
    f"{MAX_HEAD_BYTES // 1024} KiB"
)
_TOO_SLOW = (
    f"request timeout: the request's line and headers must arrive within {HEADER_TIMEOUT:g} s"
)


def _answer(status: int, reason: str, message: str) -> bytes:
    body = (message + "\n").encode("ascii")
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode("ascii") + body


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's head."""

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # a connection that never sends a byte is timed out as a head that never arrives
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_head_timer()  # a keep-alive request's first byte: its head begins
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._cancel_head_timer()  # the head has arrived (or the connection failed)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        # h11 gave up on a head still arriving beyond its size bound: say which bound
        if len(self.conn.trailing_data[0]) > MAX_HEAD_BYTES:
            self._refuse(_answer(431, "Request Header Fields Too Large", _TOO_LARGE))
        else:
            super().send_400_response(msg)

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(HEADER_TIMEOUT, self._head_too_slow)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            # a reply only to a client that began a request: an idle one is just closed
            started = bool(self.conn.trailing_data[0])
            self._refuse(_answer(408, "Request Timeout", _TOO_SLOW) if started else b"")

    def _refuse(self, answer: bytes) -> None:
        if answer:
            self.transport.write(answer)
        self.transport.close()


def _head_bytes(scope: Scope) -> int:
    """The size of a request's head as sent: request line, headers and their separators."""
    line = len(scope["method"]) + len(scope.get("raw_path") or b"") + 12
    line += len(scope.get("query_string") or b"") + 1
    return line + sum(len(name) + len(value) + 4 for name, value in scope["headers"])


def bounded_heads(app: ASGIApp) -> ASGIApp:
    """``app`` refusing (431, then closing the connection) a head over ``MAX_HEAD_BYTES``.

    h11 measures a head only while it is incomplete, so one sent in a single write passes
    it whatever its size."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _head_bytes(scope) > MAX_HEAD_BYTES:
            body = (_TOO_LARGE + "\n").encode("ascii")
            await send(
                {
                    "type": "http.response.start",
                    "status": 431,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode("ascii")),
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return guarded
