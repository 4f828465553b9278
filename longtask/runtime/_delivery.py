"""Outgoing HTTP POSTs to receivers that people configure (run webhooks of the Server API,
notifications at a pause): the URL's check against server-side request forgery, the POST to
the address that check resolved, the back-off between attempts and the redaction of what
may hold a secret. In runtime, so both the run core's notifications and serve's run
webhooks use one set of rules (serve stands above runtime and imports it from here).

A URL's host must resolve to public addresses, unless ``LONGTASK_WEBHOOK_ALLOW`` names it
(a comma-separated list of hosts, or ``*``): whoever configures a URL must not make a
longtask process call its own network (loopback, private or link-local addresses).
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import os
import random
import socket
import ssl
from http.client import HTTPConnection
from urllib.parse import unquote, urlsplit, urlunsplit

from longtask.model._notify import url_problem

__all__ = [
    "ALLOW_ENV",
    "Failed",
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


def not_public(address: str) -> bool:
    """Whether ``address`` is loopback, private, link-local or otherwise not global."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone is no part of it
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
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
    second lookup could answer another: DNS rebinding), with TLS verified for the host."""

    def __init__(
        self, host: str, port: int, address: str, timeout: float, tls: ssl.SSLContext | None
    ) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address
        self._tls = tls

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        if self._tls is not None:
            sock = self._tls.wrap_socket(sock, server_hostname=self.host)
        self.sock = sock


class Failed(Exception):
    """An attempt that did not deliver; ``retry``: whether another attempt may."""

    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
    """POST ``body`` to ``url`` (checked again here: DNS may answer otherwise now); the
    HTTP status of a 2xx answer, else Failed. Each of connect, send and read gets
    ``timeout`` seconds; redirects are not followed."""
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
    conn = _Pinned(host, port, address, timeout, tls)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request("POST", target, body=body, headers=sent)
        answer = conn.getresponse()
        answer.read(65536)
        status = answer.status
    except TimeoutError:
        raise Failed(f"no answer within {timeout:g} s") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:  # or it spoke no HTTP
        raise Failed(f"{type(exc).__name__}: {exc}") from None
    finally:
        conn.close()
    if 200 <= status < 300:
        return status
    if 300 <= status < 400:
        raise Failed(f"HTTP {status}: redirects are not followed", retry=False)
    # A receiver that refuses the request (400, 404, ...) will refuse it again; one that
    # is overloaded or failing (408, 429, 5xx) may take it later.
    raise Failed(f"HTTP {status}", retry=status in (408, 425, 429) or status >= 500)


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
