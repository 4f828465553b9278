"""Loopback names and ``Host`` headers: what open mode and the DNS-rebinding guard ask."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ::1 (with or without brackets)."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        # Any other name may resolve to anything: not loopback.
        return False


def host_of(header: str) -> str:
    """The host part of a ``Host`` header (``[::1]:8000`` -> ``::1``); a header whose port
    is not digits is returned whole, so that ``127.0.0.1:80@evil.example`` is no loopback
    name."""
    if header.startswith("[") and "]" in header:
        end = header.find("]")
        rest = header[end + 1 :]
        if rest == "" or (rest[:1] == ":" and _port(rest[1:])):
            return header[1:end]
        return header
    if header.count(":") == 1:
        name, port = header.split(":")
        return name if _port(port) else header
    return header


def _port(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 5
