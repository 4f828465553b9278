"""The error classifier, on real exception objects of openai, httpx and the standard library.

No database and no outside network: the "real failure" tests talk to 127.0.0.1 only.
"""

from __future__ import annotations

import email.message
import email.utils
import http.client
import http.server
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from types import ModuleType, SimpleNamespace
from typing import Any

import httpx
import openai
import pytest

from longtask.errors import (
    InvalidInput,
    LongTaskError,
    OutcomeUnknown,
    PermissionDenied,
    RateLimited,
    StepTimeout,
    Transient,
)
from longtask.steps import Classified, classify
from longtask.steps._classify import retry_after_seconds

# openai 3 is built on httpx2 (a fork of httpx with its own classes), older openai on httpx:
# build its responses from the module it uses, and run the httpx tests against both.
try:
    import httpx2
except ImportError:  # pragma: no cover - older openai
    httpx2 = None

OPENAI_HTTP: ModuleType = httpx2 if "httpx2" in sys.modules else httpx
HTTP_MODULES = [pytest.param(httpx, id="httpx")] + (
    [pytest.param(httpx2, id="httpx2")] if httpx2 is not None else []
)
URL = "https://api.example/v1/chat/completions"
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def _response(status: int, headers: dict[str, str] | None = None, http: Any = OPENAI_HTTP) -> Any:
    return http.Response(status, headers=headers or {}, request=http.Request("POST", URL))


def _request(http: Any = OPENAI_HTTP) -> Any:
    return http.Request("POST", URL)


def _raised(fn: Callable[[], object]) -> BaseException:
    """The exception ``fn`` raises, with its traceback and implicit context set as in real use."""
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError(f"{fn} did not raise")


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- longtask's own taxonomy -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (RateLimited("slow down", retry_after=3.5), Classified("rate_limited", 3.5)),
        (RateLimited(), Classified("rate_limited", None)),
        (Transient("blip"), Classified("transient")),
        (StepTimeout("too long"), Classified("transient")),
        (InvalidInput("bad"), Classified("invalid_input")),
        (PermissionDenied("no key"), Classified("permission")),
        (OutcomeUnknown("maybe sent"), Classified("outcome_unknown")),
        (LongTaskError("other"), Classified("error")),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v.error_class,
)
def test_taxonomy(exc: BaseException, expected: Classified) -> None:
    assert classify(exc) == expected


# -- openai --------------------------------------------------------------------------------------


def _status_error(cls: type[openai.APIStatusError], status: int, **headers: str) -> BaseException:
    return cls(f"{status}", response=_response(status, headers), body=None)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        pytest.param(
            lambda: openai.RateLimitError(
                "rate limited", response=_response(429, {"retry-after": "7"}), body=None
            ),
            Classified("rate_limited", 7.0, 429),
            id="RateLimitError-retry-after",
        ),
        pytest.param(
            lambda: _status_error(openai.RateLimitError, 429),
            Classified("rate_limited", None, 429),
            id="RateLimitError-no-header",
        ),
        pytest.param(
            lambda: openai.APITimeoutError(request=_request()),
            Classified("transient"),
            id="APITimeoutError",
        ),
        pytest.param(
            lambda: openai.APIConnectionError(request=_request()),
            Classified("transient"),
            id="APIConnectionError",
        ),
        pytest.param(
            lambda: _status_error(openai.AuthenticationError, 401),
            Classified("permission", status_code=401),
            id="AuthenticationError",
        ),
        pytest.param(
            lambda: _status_error(openai.PermissionDeniedError, 403),
            Classified("permission", status_code=403),
            id="PermissionDeniedError",
        ),
        pytest.param(
            lambda: _status_error(openai.BadRequestError, 400),
            Classified("invalid_input", status_code=400),
            id="BadRequestError",
        ),
        pytest.param(
            lambda: _status_error(openai.NotFoundError, 404),
            Classified("invalid_input", status_code=404),
            id="NotFoundError",
        ),
        pytest.param(
            lambda: _status_error(openai.UnprocessableEntityError, 422),
            Classified("invalid_input", status_code=422),
            id="UnprocessableEntityError",
        ),
        pytest.param(
            lambda: _status_error(openai.ConflictError, 409),
            Classified("transient", status_code=409),
            id="ConflictError",
        ),
        pytest.param(
            lambda: _status_error(openai.InternalServerError, 500),
            Classified("transient", status_code=500),
            id="InternalServerError",
        ),
        pytest.param(
            lambda: _status_error(openai.APIStatusError, 502),
            Classified("transient", status_code=502),
            id="APIStatusError-502",
        ),
        pytest.param(
            lambda: _status_error(openai.APIStatusError, 408),
            Classified("transient", status_code=408),
            id="APIStatusError-408",
        ),
        pytest.param(
            lambda: _status_error(openai.APIStatusError, 429, **{"Retry-After": "2"}),
            Classified("rate_limited", 2.0, 429),
            id="APIStatusError-429",
        ),
        pytest.param(
            lambda: _status_error(openai.APIStatusError, 418),
            Classified("invalid_input", status_code=418),
            id="APIStatusError-418",
        ),
    ],
)
def test_openai(make: Callable[[], BaseException], expected: Classified) -> None:
    assert classify(make(), now=NOW) == expected


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500", "retry-after": "7"}, 1.5),
        ({"Retry-After-Ms": "250"}, 0.25),
        # an unusable retry-after-ms does not hide a usable retry-after
        ({"retry-after-ms": "soon", "retry-after": "7"}, 7.0),
        ({"retry-after": email.utils.format_datetime(NOW + timedelta(seconds=90), True)}, 90.0),
    ],
)
def test_openai_rate_limit_retry_after(headers: dict[str, str], expected: float) -> None:
    exc = openai.RateLimitError("rate limited", response=_response(429, headers), body=None)
    assert classify(exc, now=NOW) == Classified("rate_limited", expected, 429)


def test_openai_is_only_looked_up_when_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without openai in sys.modules its classes are not consulted; what still classifies is the
    # generic status_code attribute.
    connection = openai.APIConnectionError(request=_request())
    auth = _status_error(openai.AuthenticationError, 401)
    monkeypatch.delitem(sys.modules, "openai")
    assert classify(connection) == Classified("error")
    assert classify(auth) == Classified("permission", status_code=401)


def test_importing_longtask_does_not_import_openai() -> None:
    code = (
        "import sys, longtask, longtask.steps, longtask.steps._classify\n"
        "assert 'openai' not in sys.modules, 'openai was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- httpx (and httpx2) ----------------------------------------------------------------------


@pytest.mark.parametrize("http", HTTP_MODULES)
@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (503, {}, Classified("transient", status_code=503)),
        (500, {}, Classified("transient", status_code=500)),
        (429, {"Retry-After": "12"}, Classified("rate_limited", 12.0, 429)),
        (429, {}, Classified("rate_limited", None, 429)),
        (425, {}, Classified("transient", status_code=425)),
        (401, {}, Classified("permission", status_code=401)),
        (403, {}, Classified("permission", status_code=403)),
        (404, {}, Classified("invalid_input", status_code=404)),
        (400, {}, Classified("invalid_input", status_code=400)),
    ],
)
def test_httpx_status_error(
    http: Any, status: int, headers: dict[str, str], expected: Classified
) -> None:
    response = _response(status, headers, http=http)
    exc = _raised(response.raise_for_status)
    assert isinstance(exc, http.HTTPStatusError)
    assert classify(exc, now=NOW) == expected


@pytest.mark.parametrize("http", HTTP_MODULES)
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ConnectTimeout", "transient"),
        ("ReadTimeout", "transient"),
        ("PoolTimeout", "transient"),
        ("ConnectError", "transient"),
        ("ReadError", "transient"),
        ("RemoteProtocolError", "transient"),
        ("UnsupportedProtocol", "invalid_input"),
        ("LocalProtocolError", "invalid_input"),
        ("DecodingError", "error"),
    ],
)
def test_httpx_transport_errors(http: Any, name: str, expected: str) -> None:
    exc = getattr(http, name)("failed", request=_request(http))
    assert classify(exc) == Classified(expected)  # type: ignore[arg-type]


# -- standard library ------------------------------------------------------------------------


def _http_error(code: int, **headers: str) -> urllib.error.HTTPError:
    message = email.message.Message()
    for name, value in headers.items():
        message[name] = value
    return urllib.error.HTTPError(URL, code, "status", message, None)


def test_urllib_http_error_retry_after_date() -> None:
    exc = _http_error(429, **{"Retry-After": "Thu, 01 Jan 2026 12:02:00 GMT"})
    assert classify(exc, now=NOW) == Classified("rate_limited", 120.0, 429)
    assert classify(exc, now=NOW + timedelta(minutes=5)) == Classified("rate_limited", 0.0, 429)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (_http_error(503), Classified("transient", status_code=503)),
        (_http_error(403), Classified("permission", status_code=403)),
        (_http_error(422), Classified("invalid_input", status_code=422)),
        (urllib.error.URLError("name resolution failed"), Classified("transient")),
        (ConnectionRefusedError(111, "Connection refused"), Classified("transient")),
        (ConnectionResetError(104, "reset"), Classified("transient")),
        (BrokenPipeError(32, "broken pipe"), Classified("transient")),
        (TimeoutError("timed out"), Classified("transient")),
        (socket.timeout("timed out"), Classified("transient")),  # noqa: UP041 - the old name
        (socket.gaierror(socket.EAI_AGAIN, "Temporary failure"), Classified("transient")),
        (http.client.RemoteDisconnected("closed"), Classified("transient")),
        (http.client.IncompleteRead(b"part", 10), Classified("transient")),
        (PermissionError(13, "Permission denied"), Classified("permission")),
        (FileNotFoundError(2, "No such file"), Classified("error")),
        (ValueError("bad"), Classified("error")),
        (KeyError("k"), Classified("error")),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v.error_class,
)
def test_stdlib(exc: BaseException, expected: Classified) -> None:
    assert classify(exc, now=NOW) == expected


# -- other clients, by duck typing -------------------------------------------------------------


class _StatusCodeError(Exception):
    def __init__(self, status_code: Any, headers: Any = None) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code
        self.headers = headers


class _StatusError(Exception):  # aiohttp's ClientResponseError has .status and .headers
    def __init__(self, status: Any, headers: Any = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.headers = headers


class _ResponseError(Exception):
    def __init__(self, response: Any) -> None:
        super().__init__("HTTP error")
        self.response = response


class _NotRetryable(Exception):
    retryable = False


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (_StatusCodeError(502), Classified("transient", status_code=502)),
        (_StatusCodeError(409), Classified("transient", status_code=409)),
        (_StatusError(429, {"RETRY-AFTER": "4"}), Classified("rate_limited", 4.0, 429)),
        (_StatusError(401), Classified("permission", status_code=401)),
        (
            _ResponseError(SimpleNamespace(status_code=429, headers={"retry-after": "9"})),
            Classified("rate_limited", 9.0, 429),
        ),
        (_ResponseError(SimpleNamespace(status_code=410)), Classified("invalid_input", None, 410)),
        (_ResponseError(None), Classified("error")),
        # not HTTP statuses
        (_StatusCodeError(True), Classified("error")),
        (_StatusCodeError("503"), Classified("error")),
        (_StatusError(1), Classified("error")),
        (_StatusCodeError(200), Classified("error", status_code=200)),
        # retryable=False alone is for the caller to judge
        (_NotRetryable("no"), Classified("error")),
    ],
    ids=repr,
)
def test_duck_typed(exc: BaseException, expected: Classified) -> None:
    assert classify(exc, now=NOW) == expected


def test_requests_http_error() -> None:
    requests = pytest.importorskip("requests")
    response = requests.Response()
    response.status_code = 429
    response.headers["Retry-After"] = "5"
    response.url = URL
    exc = _raised(response.raise_for_status)
    assert isinstance(exc, requests.HTTPError)
    assert classify(exc) == Classified("rate_limited", 5.0, 429)


# -- the cause chain -----------------------------------------------------------------------------


def _wrapped_rate_limit() -> None:
    try:
        raise openai.RateLimitError(
            "rate limited", response=_response(429, {"retry-after": "7"}), body=None
        )
    except openai.RateLimitError as err:
        raise RuntimeError("the summarise step failed") from err


def _implicit_context() -> None:
    try:
        raise httpx.ConnectError("refused", request=_request(httpx))
    except httpx.ConnectError:
        raise ValueError("while handling it, something else broke")  # noqa: B904


def _suppressed_context() -> None:
    try:
        raise httpx.ConnectError("refused", request=_request(httpx))
    except httpx.ConnectError:
        raise ValueError("not related") from None


def _own_class_wins() -> None:
    try:
        raise Transient("blip")
    except Transient as err:
        raise InvalidInput("but the input is bad anyway") from err


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (_wrapped_rate_limit, Classified("rate_limited", 7.0, 429)),
        (_implicit_context, Classified("transient")),
        (_suppressed_context, Classified("error")),
        (_own_class_wins, Classified("invalid_input")),
    ],
    ids=lambda v: getattr(v, "__name__", None) or v.error_class,
)
def test_cause_chain(fn: Callable[[], None], expected: Classified) -> None:
    assert classify(_raised(fn)) == expected


def test_cause_chain_cycle_and_depth() -> None:
    a, b = ValueError("a"), ValueError("b")
    a.__cause__, b.__cause__ = b, a
    assert classify(a) == Classified("error")

    def chain(depth: int) -> BaseException:
        exc: BaseException = Transient("at the bottom")
        for i in range(depth):
            outer = RuntimeError(f"wrapper {i}")
            outer.__cause__ = exc
            exc = outer
        return exc

    assert classify(chain(5)) == Classified("transient")
    assert classify(chain(1000)) == Classified("error")


# -- retry_after_seconds -------------------------------------------------------------------------


def _message(**headers: str) -> email.message.Message:
    message = email.message.Message()
    for name, value in headers.items():
        message[name] = value
    return message


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "5"}, 5.0),
        ({"RETRY-AFTER": " 2.5 "}, 2.5),
        ({b"retry-after": b"3"}, 3.0),
        (httpx.Headers({"Retry-After": "6"}), 6.0),
        (_message(**{"Retry-After": "8"}), 8.0),
        (_message(**{"Retry-After-Ms": "100"}), 0.1),
        ({"retry-after-ms": "1500", "retry-after": "7"}, 1.5),
        ({"retry-after-ms": "-20"}, 0.0),
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after": "Thu, 01 Jan 2026 12:00:30 GMT"}, 30.0),
        ({"retry-after": "Thu, 01 Jan 2026 11:00:00 GMT"}, 0.0),
        ({"retry-after": "Thu, 01 Jan 2026 12:00:30 -0000"}, 30.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": ""}, None),
        ({"x-other": "1"}, None),
        ({}, None),
        (None, None),
    ],
    # stable ids: xdist workers must collect the same names (no object addresses)
    ids=lambda v: type(v).__name__ if hasattr(v, "get_all") else repr(v),
)
def test_retry_after_seconds(headers: Any, expected: float | None) -> None:
    assert retry_after_seconds(headers, now=NOW) == expected


def test_retry_after_naive_now_and_default_now() -> None:
    headers = {"retry-after": "Thu, 01 Jan 2026 12:00:30 GMT"}
    assert retry_after_seconds(headers, now=NOW.replace(tzinfo=None)) == 30.0
    future = email.utils.format_datetime(datetime.now(UTC) + timedelta(hours=1), usegmt=True)
    waited = retry_after_seconds({"retry-after": future})
    assert waited is not None
    assert 3500 < waited <= 3600


# -- real failures on 127.0.0.1 ----------------------------------------------------------------


def test_real_connection_refused() -> None:
    base = f"http://127.0.0.1:{_closed_port()}"

    with httpx.Client(timeout=5) as client:
        exc = _raised(lambda: client.get(base))
    assert isinstance(exc, httpx.ConnectError)
    assert classify(exc) == Classified("transient")

    exc = _raised(lambda: urllib.request.urlopen(base, timeout=5))
    assert isinstance(exc, urllib.error.URLError)
    assert classify(exc) == Classified("transient")

    api = openai.OpenAI(api_key="test", base_url=f"{base}/v1", max_retries=0, timeout=5)
    exc = _raised(api.models.list)
    assert isinstance(exc, openai.APIConnectionError)
    assert classify(exc) == Classified("transient")


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers ``/<status>`` with that status and a ``Retry-After: 3``."""

    def do_GET(self) -> None:
        status = int(self.path.rstrip("/").rsplit("/", 1)[-1])
        body = b'{"error": {"message": "no", "type": "test"}}'
        self.send_response(status)
        self.send_header("Retry-After", "3")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _fetch_httpx(base: str, status: int) -> None:
    with httpx.Client(timeout=5) as client:
        client.get(f"{base}/{status}").raise_for_status()


def _fetch_urllib(base: str, status: int) -> None:
    urllib.request.urlopen(f"{base}/{status}", timeout=5)


def _fetch_openai(base: str, status: int) -> None:
    api = openai.OpenAI(api_key="test", base_url=base, max_retries=0, timeout=5)
    api.models.retrieve(str(status))


@pytest.mark.parametrize("fetch", [_fetch_httpx, _fetch_urllib, _fetch_openai])
@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (429, Classified("rate_limited", 3.0, 429)),
        (503, Classified("transient", status_code=503)),
        (401, Classified("permission", status_code=401)),
        (404, Classified("invalid_input", status_code=404)),
    ],
)
def test_real_http_responses(
    server: str, fetch: Callable[[str, int], None], status: int, expected: Classified
) -> None:
    assert classify(_raised(lambda: fetch(server, status))) == expected
