"""What a run webhook's URL may be and how it is shown (longtask.serve._webhooks), without
the network: addresses that are not public are refused unless the host is allowed, and
the URL shown in events and runs has no credentials or query string."""

from __future__ import annotations

import pytest
from starlette.exceptions import HTTPException

from longtask.runtime._delivery import ALLOW_ENV
from longtask.runtime._delivery import not_public as _not_public
from longtask.runtime._delivery import scrub as _scrub
from longtask.serve._webhooks import check_url, redacted


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("8.8.8.8", False),
        ("2001:4860:4860::8888", False),
        ("127.0.0.1", True),
        ("10.0.0.1", True),
        ("172.16.5.4", True),
        ("192.168.1.1", True),
        ("100.64.0.1", True),  # carrier-grade NAT
        ("169.254.169.254", True),  # cloud metadata
        ("0.0.0.0", True),
        ("224.0.0.1", True),
        ("::1", True),
        ("fe80::1%eth0", True),
        ("fc00::1", True),
        ("::ffff:10.0.0.1", True),  # an IPv4-mapped private address
    ],
)
def test_addresses_that_are_not_public_are_refused(address: str, refused: bool) -> None:
    assert _not_public(address) is refused


def test_the_url_is_shown_without_credentials_or_query() -> None:
    url = "https://user:pw@hooks.example.com:8443/services/T1/B2?token=abc#frag"
    assert redacted(url) == "https://hooks.example.com:8443/services/T1/B2"
    assert redacted("http://[::1]:9/h?x=1") == "http://[::1]:9/h"
    message = f"could not reach {url}: pw, token=abc"
    scrubbed = _scrub(message, url)
    assert "pw" not in scrubbed and "token=abc" not in scrubbed


def test_an_allowed_host_may_be_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    with pytest.raises(HTTPException) as refused:
        check_url("http://127.0.0.1:9/hook")
    assert refused.value.status_code == 422 and ALLOW_ENV in refused.value.detail
    monkeypatch.setenv(ALLOW_ENV, "example.org, 127.0.0.1")
    assert check_url("http://127.0.0.1:9/hook") == "http://127.0.0.1:9/hook"
    with pytest.raises(HTTPException):
        check_url("http://10.0.0.1/hook")  # not named
    monkeypatch.setenv(ALLOW_ENV, "*")
    assert check_url("http://10.0.0.1/hook") == "http://10.0.0.1/hook"
