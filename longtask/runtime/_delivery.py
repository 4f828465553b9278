"""Outgoing HTTP POSTs to receivers that people configure (run webhooks of the Server API,
notifications at a pause): the URL's check against server-side request forgery, the POST to
the address that check resolved, the back-off between attempts and the redaction of what
may hold a secret. In runtime, so both the run core's notifications and serve's run
webhooks use one set of rules (serve stands above runtime and imports it from here).

A URL's host must resolve to public addresses, unless ``LONGTASK_WEBHOOK_ALLOW`` names it
(a comma-separated list of hosts, or ``*``): whoever configures a URL must not make a
longtask process call its own network (loopback, private or link-local addresses). An IPv6
address that carries an IPv4 one (IPv4-mapped or -compatible, 6to4, Teredo, NAT64) is
judged by the IPv4 address too: ``[2002:7f00:1::]`` reaches 127.0.0.1 through a 6to4 relay.

An attempt is bounded as a whole: connect, send and the answer's read together get the
timeout (a receiver that drips a byte at a time is cut off when it ends), and ``Lanes``
keeps receivers apart, so a slow one delays only what is sent to it.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import ipaddress
import os
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.client import HTTPConnection
from urllib.parse import unquote, urlsplit, urlunsplit

from longtask.model._notify import url_problem

__all__ = [
    "ALLOW_ENV",
    "Failed",
    "Lanes",
    "backoff_wait",
    "check_shape",
    "not_public",
    "post",
    "redacted",
    "resolve",
    "scrub",
]

#: hosts a webhook or notification may reach although they resolve to a loopback, private
#: or link-local address: a comma-separated list, or ``*`` for any
ALLOW_ENV = "LONGTASK_WEBHOOK_ALLOW"


def redacted(url: str) -> str:
    """``url`` as events, logs and run objects show it: no user, password, query string
    or fragment (where secrets of a webhook URL usually are)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def check_shape(value: object, what: str = "webhook") -> str | None:
    """What is wrong with ``value`` as a receiver's URL, before any lookup (None: nothing);
    the model's rule, which a task's ``notify=`` is checked by at definition time."""
    return url_problem(value, what)


def _allowed(host: str) -> bool:
    allow = {h.strip().lower() for h in os.environ.get(ALLOW_ENV, "").split(",") if h.strip()}
    return "*" in allow or host.lower() in allow


#: NAT64 prefixes (RFC 6052's well-known one and RFC 8215's local-use one): the IPv4
#: address is the last 32 bits
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
#: IPv4-compatible addresses (deprecated, RFC 4291): ::a.b.c.d
_COMPATIBLE = ipaddress.ip_network("::/96")


def embedded(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries, which a relay or translator may connect
    to: IPv4-mapped, IPv4-compatible, 6to4, Teredo (its server and its client) and NAT64."""
    out: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        out.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        out.append(ip.sixtofour)
    if ip.teredo is not None:
        out.extend(ip.teredo)
    low = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if any(ip in net for net in _NAT64):
        out.append(low)
    # :: and ::1 are themselves (unspecified, loopback), not 0.0.0.0 and 0.0.0.1
    if ip in _COMPATIBLE and int(ip) > 1:
        out.append(low)
    return out


def not_public(address: str) -> bool:
    """Whether ``address`` is loopback, private, link-local or otherwise not global, or
    is an IPv6 address that carries such an IPv4 address (``embedded``)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone is no part of it
    if isinstance(ip, ipaddress.IPv6Address):
        if any(not v4.is_global or v4.is_multicast for v4 in embedded(ip)):
            return True
        if ip.ipv4_mapped is not None:
            return False  # judged as its IPv4 address (::ffff:0:0/96 is never global)
    return not ip.is_global or ip.is_multicast


def _addresses(host: str, port: int) -> list[str]:
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


def resolve(url: str) -> tuple[str, int, str]:
    """The host, port and address to connect to; ValueError saying why the URL may not be
    called (its host resolves nowhere, or to an address that is not public and the host is
    not allowed)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = _addresses(host, port)
    except (OSError, UnicodeError) as exc:
        raise ValueError(f"its host {host!r} does not resolve ({exc})") from None
    if not addresses:
        raise ValueError(f"its host {host!r} does not resolve")
    if not _allowed(host):
        private = [a for a in addresses if not_public(a)]
        if private:
            raise ValueError(
                f"its host {host!r} is {private[0]}, a loopback, private or link-local "
                f"address, refused so that a longtask process is not made to call its own "
                f"network (server-side request forgery); to allow it, name the host in "
                f"{ALLOW_ENV} (a comma-separated list of hosts, or * for any)"
            )
    return host, port, addresses[0]


class _Pinned(HTTPConnection):
    """An HTTP(S) connection to the address the URL's host was checked to resolve to (a
    second lookup could answer another: DNS rebinding), with TLS verified for the host,
    cut off at ``deadline`` (``time.monotonic()``) whatever it is doing then."""

    def __init__(
        self, host: str, port: int, address: str, deadline: float, tls: ssl.SSLContext | None
    ) -> None:
        super().__init__(host, port, timeout=max(0.001, deadline - time.monotonic()))
        self._address = address
        self._tls = tls
        self._deadline = deadline
        self._lock = threading.Lock()
        self._raw: socket.socket | None = None
        self._timer: threading.Timer | None = None
        #: whether the deadline cut the connection
        self.cut = False

    def connect(self) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the attempt's time ran out")
        sock = socket.create_connection((self._address, self.port), left)
        with self._lock:
            # A duplicate of the socket's descriptor: shutting it down ends every read or
            # write in progress on the connection (TLS too), which a socket timeout does
            # not when the receiver sends a byte now and then.
            self._raw = sock.dup()
            self._timer = threading.Timer(max(0.0, self._deadline - time.monotonic()), self._cut)
            self._timer.daemon = True
            self._timer.start()
        if self._tls is not None:
            sock = self._tls.wrap_socket(sock, server_hostname=self.host)
        self.sock = sock

    def _cut(self) -> None:
        with self._lock:
            if self._raw is None:
                return
            self.cut = True
            with contextlib.suppress(OSError):  # closed already
                self._raw.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            if self._raw is not None:
                self._raw.close()
                self._raw = None
        super().close()


class Failed(Exception):
    """An attempt that did not deliver; ``retry``: whether another attempt may."""

    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
    """POST ``body`` to ``url`` (checked again here: DNS may answer otherwise now); the
    HTTP status of a 2xx answer, else Failed. The attempt as a whole (the host's lookup,
    connect, send, and reading the answer's status line, headers and first 64 KiB) gets
    ``timeout`` seconds, however the receiver spaces its bytes; redirects are not
    followed."""
    deadline = time.monotonic() + timeout
    try:
        host, port, address = resolve(url)
    except ValueError as exc:
        # a host that resolves nowhere may resolve later; one refused stays refused
        raise Failed(f"refused: {exc}", retry="does not resolve" in str(exc)) from None
    parts = urlsplit(url)
    sent = dict(headers)
    if parts.username is not None:
        who = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        sent["Authorization"] = "Basic " + base64.b64encode(who.encode()).decode()
    tls = ssl.create_default_context() if parts.scheme == "https" else None
    conn = _Pinned(host, port, address, deadline, tls)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request("POST", target, body=body, headers=sent)
        answer = conn.getresponse()
        answer.read(65536)
        status = answer.status
    except (OSError, ValueError, http.client.HTTPException) as exc:  # or it spoke no HTTP
        if conn.cut or isinstance(exc, TimeoutError) or time.monotonic() >= deadline:
            raise Failed(f"no answer within {timeout:g} s") from None
        raise Failed(f"{type(exc).__name__}: {exc}") from None
    finally:
        conn.close()
    if conn.cut:
        # cut while the answer's body was read: its status came, but late
        raise Failed(f"no answer within {timeout:g} s") from None
    if 200 <= status < 300:
        return status
    if 300 <= status < 400:
        raise Failed(f"HTTP {status}: redirects are not followed", retry=False)
    # A receiver that refuses the request (400, 404, ...) will refuse it again; one that
    # is overloaded or failing (408, 429, 5xx) may take it later.
    raise Failed(f"HTTP {status}", retry=status in (408, 425, 429) or status >= 500)


class Lanes:
    """One lane per receiver: at most one attempt to each receiver at a time in this
    process, and at most ``limit`` attempts in all, each in a thread of its own, so a slow
    receiver holds up only what waits for its own lane. ``on_free(key)`` is called (in
    the attempt's thread) after a lane's attempt ends."""

    #: what ``start`` answers when every lane is taken (``limit`` attempts in flight)
    ANY = "*"

    def __init__(self, limit: int, on_free: Callable[[str], None]) -> None:
        self.limit = max(1, limit)
        self._on_free = on_free
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def start(self, key: str, work: Callable[[], None], name: str) -> str | None:
        """Run ``work`` in the lane ``key`` now (None); or, with nothing run, what to wait
        for: ``key`` if its lane is busy, ``ANY`` if ``limit`` attempts are in flight."""
        with self._lock:
            if key in self._busy:
                return key
            if len(self._busy) >= self.limit:
                return self.ANY
            self._busy.add(key)
        # A daemon thread: a process that exits never waits on a receiver; what it cut
        # off is still owed in the database.
        threading.Thread(target=self._run, args=(key, work), name=name, daemon=True).start()
        return None

    def _run(self, key: str, work: Callable[[], None]) -> None:
        try:
            work()
        finally:
            with self._lock:
                self._busy.discard(key)
                self._idle.notify_all()
            self._on_free(key)

    def busy(self, key: str) -> bool:
        with self._lock:
            return key in self._busy or len(self._busy) >= self.limit

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._busy)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for an attempt to end; whether none is in flight."""
        with self._lock:
            if self._busy:
                self._idle.wait(timeout)
            return not self._busy


def backoff_wait(attempt: int, backoff: float, max_wait: float) -> float:
    """Seconds before the retry after failed attempt number ``attempt`` (1-based):
    ``backoff * 2**(attempt-1)``, at most ``max_wait``, with jitter (receivers that came
    back are not hit by every sender at the same moment)."""
    return float(min(max_wait, backoff * 2 ** (attempt - 1)) * random.uniform(1.0, 1.25))


def scrub(message: str, url: str) -> str:
    """``message`` with no part of ``url`` that may hold a secret."""
    parts = urlsplit(url)
    for secret in (url, parts.query, parts.password, parts.username, parts.fragment):
        if secret:
            message = message.replace(secret, "…")
    return message
