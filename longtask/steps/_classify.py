"""Sort a step's exception into an error class, the basis of its retry decision.

Besides longtask's own taxonomy (:mod:`longtask.errors`), this knows the exceptions of
``openai``, ``httpx`` (and ``httpx2``, the fork ``openai`` 3 is built on) and the standard
library, and reads an HTTP status from any exception that carries one. Third-party modules
are looked up in :data:`sys.modules` and never imported: an exception of a library nobody
imported cannot occur, and longtask must not depend on those libraries.
"""

from __future__ import annotations

import email.utils
import http.client
import math
import socket
import sys
import urllib.error
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType
from typing import Any, Literal, TypeGuard

from longtask.errors import (
    InvalidInput,
    OutcomeUnknown,
    PermissionDenied,
    RateLimited,
    StepTimeout,
    Transient,
)

ErrorClass = Literal[
    "transient", "rate_limited", "invalid_input", "permission", "outcome_unknown", "error"
]

# A chain longer than this is pathological; the bound (with the seen-set) also guards against
# cycles that code assigning __cause__/__context__ by hand can create.
_MAX_CHAIN = 16

# The status codes that say "try again later" although they are 4xx: request timeout,
# conflict (typically a lock or a concurrent update) and "too early" (TLS early data replay).
_PASSING_4XX = frozenset({408, 409, 425})

# Connection-level failures of the standard library. DNS failures (socket.gaierror) are
# counted as passing: most are a resolver outage or timeout (EAI_AGAIN), and even "no such
# name" is often a split-horizon/VPN or propagation hiccup; a name that is really wrong
# still ends after the caller's bounded retries, whereas a wrong "permanent" verdict would
# fail a long task on a blip.
_STDLIB_TRANSIENT: tuple[type[BaseException], ...] = (
    TimeoutError,  # also socket.timeout and asyncio.TimeoutError
    ConnectionError,  # refused, reset, aborted, broken pipe, http.client.RemoteDisconnected
    socket.gaierror,
    http.client.IncompleteRead,
    http.client.RemoteDisconnected,
)


@dataclass(frozen=True)
class Classified:
    """The error class of an exception, with what the retry decision needs from it."""

    error_class: ErrorClass
    #: seconds the server asked to wait (rate_limited only; None when it named no time)
    retry_after: float | None = None
    #: HTTP status the error carried, if any
    status_code: int | None = None


def classify(exc: BaseException, now: datetime | None = None) -> Classified:
    """Classify ``exc`` (or, failing that, the first exception in its cause chain).

    ``now`` is the time a ``Retry-After`` HTTP-date is measured from (default: the current
    time). An exception nothing recognises is ``"error"``: the caller retries it per its
    policy.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < _MAX_CHAIN:
        seen.add(id(current))
        found = _classify_one(current, now)
        if found is not None:
            return found
        # Follow what the traceback would show: an explicit cause, else the exception being
        # handled when this one was raised, unless `raise ... from None` hid it.
        if current.__cause__ is not None:
            current = current.__cause__
        elif not current.__suppress_context__:
            current = current.__context__
        else:
            current = None
    return Classified("error", status_code=_status_of(exc))


def retry_after_seconds(
    headers: Mapping[str, str] | Any, now: datetime | None = None
) -> float | None:
    """Seconds to wait as the response headers ask, or None if they name no (valid) time.

    ``retry-after-ms`` (milliseconds, a non-standard header OpenAI and others send for
    sub-second precision) wins over ``retry-after``, which holds seconds or an HTTP-date,
    measured from ``now``. A time in the past is 0. ``headers`` may be ``httpx.Headers``, an
    ``email.message.Message`` (urllib) or a plain mapping; names match case-insensitively.
    """
    millis = _number(_header(headers, "retry-after-ms"))
    if millis is not None:
        return max(millis / 1000.0, 0.0)
    raw = _header(headers, "retry-after")
    if raw is None:
        return None
    seconds = _number(raw)
    if seconds is not None:
        return max(seconds, 0.0)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError, OverflowError):
        # parsedate_to_datetime has raised each of these for malformed dates across Python
        # versions; a bad header is the server's problem, not a reason to fail classification.
        return None
    # An HTTP-date is always GMT; "-0000" makes parsedate_to_datetime return a naive value.
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    ref = now if now is not None else datetime.now(UTC)
    if ref.tzinfo is None:
        ref = ref.replace(tzinfo=UTC)
    return max((when - ref).total_seconds(), 0.0)


def _classify_one(exc: BaseException, now: datetime | None) -> Classified | None:
    return (
        _classify_ours(exc)
        or _classify_openai(exc, now)
        or _classify_httpx(exc, now)
        or _classify_stdlib(exc, now)
        or _classify_duck(exc, now)
    )


def _classify_ours(exc: BaseException) -> Classified | None:
    if isinstance(exc, RateLimited):
        return Classified("rate_limited", retry_after=exc.retry_after)
    if isinstance(exc, Transient | StepTimeout):
        return Classified("transient")
    if isinstance(exc, InvalidInput):
        return Classified("invalid_input")
    if isinstance(exc, PermissionDenied):
        return Classified("permission")
    if isinstance(exc, OutcomeUnknown):
        return Classified("outcome_unknown")
    return None


def _classify_openai(exc: BaseException, now: datetime | None) -> Classified | None:
    openai = sys.modules.get("openai")
    if openai is None:
        return None
    # Checked before httpx: openai wraps every httpx(2) error in APIConnectionError (keeping
    # it as __cause__), and its status errors are not httpx.HTTPStatusError.
    if isinstance(exc, _classes(openai, "APIConnectionError")):  # includes APITimeoutError
        return Classified("transient")
    if not isinstance(exc, _classes(openai, "APIStatusError")):
        return None
    status = getattr(exc, "status_code", None)
    code = status if _is_status(status) else None
    headers = _headers_of(getattr(exc, "response", None))
    # The class is openai's verdict on the status and wins over it; other status errors
    # (BadRequestError, NotFoundError, ConflictError, a bare APIStatusError...) go by status.
    if isinstance(exc, _classes(openai, "RateLimitError")):
        return Classified("rate_limited", retry_after_seconds(headers, now), code)
    if isinstance(exc, _classes(openai, "AuthenticationError", "PermissionDeniedError")):
        return Classified("permission", status_code=code)
    if isinstance(exc, _classes(openai, "InternalServerError")):
        return Classified("transient", status_code=code)
    return _by_status(status, headers, now)


def _classify_httpx(exc: BaseException, now: datetime | None) -> Classified | None:
    for name in ("httpx", "httpx2"):
        module = sys.modules.get(name)
        if module is None:
            continue
        if isinstance(exc, _classes(module, "HTTPStatusError")):
            response = getattr(exc, "response", None)
            status = getattr(response, "status_code", None)
            return _by_status(status, _headers_of(response), now)
        # Both are TransportErrors, but they mean the request cannot be sent at all (a URL
        # scheme httpx has no transport for; a request h11 refuses as malformed): sending it
        # again fails the same way.
        if isinstance(exc, _classes(module, "UnsupportedProtocol", "LocalProtocolError")):
            return Classified("invalid_input")
        if isinstance(exc, _classes(module, "TimeoutException", "TransportError")):
            return Classified("transient")
    return None


def _classify_stdlib(exc: BaseException, now: datetime | None) -> Classified | None:
    # HTTPError is a URLError, so it must come first.
    if isinstance(exc, urllib.error.HTTPError):
        return _by_status(exc.code, exc.headers, now)
    if isinstance(exc, (urllib.error.URLError, *_STDLIB_TRANSIENT)):
        return Classified("transient")
    if isinstance(exc, PermissionError):
        return Classified("permission")
    return None


def _classify_duck(exc: BaseException, now: datetime | None) -> Classified | None:
    # Other HTTP clients: requests.HTTPError (.response.status_code), aiohttp's
    # ClientResponseError (.status, .headers), SDKs exposing .status_code.
    response = getattr(exc, "response", None)
    headers = _headers_of(response)
    if headers is None:
        headers = getattr(exc, "headers", None)
    return _by_status(_status_of(exc), headers, now)


def _by_status(status: object, headers: Any, now: datetime | None) -> Classified | None:
    """The status mapping shared by every client; None for a status that is no error."""
    if not _is_status(status):
        return None
    if status in (401, 403):
        return Classified("permission", status_code=status)
    if status == 429:
        return Classified(
            "rate_limited", retry_after=retry_after_seconds(headers, now), status_code=status
        )
    if status in _PASSING_4XX or status >= 500:
        return Classified("transient", status_code=status)
    if status >= 400:
        return Classified("invalid_input", status_code=status)
    return None


def _status_of(exc: BaseException) -> int | None:
    for value in (
        getattr(exc, "status_code", None),
        getattr(exc, "status", None),
        getattr(getattr(exc, "response", None), "status_code", None),
    ):
        if _is_status(value):
            return value
    return None


def _is_status(value: object) -> TypeGuard[int]:
    # Other ints (exit codes, errnos, True) are not HTTP statuses.
    return isinstance(value, int) and 100 <= value <= 599


def _headers_of(response: object) -> Any:
    return getattr(response, "headers", None) if response is not None else None


def _classes(module: ModuleType, *names: str) -> tuple[type[BaseException], ...]:
    # getattr with a default: a module found in sys.modules may be half-imported, or an
    # unrelated module of the same name.
    found = (getattr(module, name, None) for name in names)
    return tuple(c for c in found if isinstance(c, type) and issubclass(c, BaseException))


def _header(headers: Any, name: str) -> str | None:
    if headers is None:
        return None
    # httpx.Headers, email.message.Message and requests' CaseInsensitiveDict match names
    # case-insensitively in .get(); a plain dict needs the scan below.
    get = getattr(headers, "get", None)
    if callable(get):
        value = get(name)
        if value is not None:
            return _text(value)
    items = getattr(headers, "items", None)
    if callable(items):
        for key, value in items():
            if _text(key).lower() == name:
                return _text(value)
    return None


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    # email.message.Message.get() returns a Header object for a non-ASCII value
    return str(value)


def _number(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    # float() accepts "nan" and "inf", which no server means as a wait
    return value if math.isfinite(value) else None
