"""Notifications without the network (issue 42): ``notify=`` is checked with the rest of a
definition and stays out of its hash; a notice's key is stable across processes and its
own per reminder; the signature is what a receiver recomputes; a Slack incoming webhook
gets ``{"text": ...}`` alone."""

from __future__ import annotations

import hashlib
import hmac
import subprocess
import sys
from pathlib import Path

import pytest

from longtask import LongTask, Notify, Stage, approval, function_step, wait_for
from longtask.errors import DefinitionError
from longtask.runtime._delivery import not_public, resolve
from longtask.runtime._notify import _text, idempotency_key, payload_for, signature, targets
from longtask.store._notify import Notification


@function_step
def work(ctx: object) -> int:
    return 1


def task(**kw: object) -> LongTask:
    return LongTask("t", [Stage("s", [work, approval("go", **kw)])])  # type: ignore[arg-type]


def notice(reminder: int = 0, event_id: int = 7) -> Notification:
    return Notification(
        event_id, reminder, "th-1", "approval.required", "go", 1.0, 0.0, 0, None, (), None
    )


def test_every_problem_of_notify_is_reported_at_definition_time() -> None:
    with pytest.raises(DefinitionError) as info:
        LongTask(
            "t",
            [Stage("s", [approval("go", notify=["ftp://x.example/h", "https://ok.example"])])],
            notify={"urls": ["https://a.example/h"], "remind_after": 0, "on": ["approvals"]},
        )
    text = str(info.value)
    assert "step 'go': notify URL 'ftp://x.example/h' must be an absolute http or https" in text
    assert "task notify: remind_after must be greater than 0" in text
    assert "notify on 'approvals' is not a moment longtask tells of" in text


def test_notify_is_not_part_of_the_definition_hash() -> None:
    plain = task()
    told = LongTask(
        "t",
        [Stage("s", [work, approval("go", notify="https://b.example/h")])],
        notify=Notify(urls=["https://a.example/h"], remind_after=60),
    )
    assert told.definition_hash == plain.definition_hash
    assert told.notify is not None and told.notify.urls == ("https://a.example/h",)


def test_a_notice_goes_to_the_step_the_task_and_the_environment_once_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LONGTASK_NOTIFY", "https://env.example/h, https://a.example/h")
    t = LongTask(
        "t",
        [Stage("s", [approval("go", notify="https://b.example/h"), wait_for("cb")])],
        notify=Notify(urls=["https://a.example/h"], on=["approval", "failed"]),
    )
    assert targets(t, "go", "approval") == [
        "https://b.example/h",
        "https://a.example/h",
        "https://env.example/h",
    ]
    # the task's `on` leaves waits out; the environment's URLs get every kind
    assert targets(t, "cb", "wait") == ["https://env.example/h", "https://a.example/h"]


def test_the_idempotency_key_is_stable_across_processes_and_new_per_reminder() -> None:
    key = idempotency_key("th-1", notice())
    code = (
        "from longtask.runtime._notify import idempotency_key\n"
        "from longtask.store._notify import Notification\n"
        "n = Notification(7, 0, 'th-1', 'approval.required', 'go', 2.0, 5.0, 3, None, (), None)\n"
        "print(idempotency_key('th-1', n))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": str(Path(sys.executable).parent)},
    )
    assert other.stdout.strip() == key  # attempts and times are no part of it
    assert idempotency_key("th-1", notice(reminder=1)) != key
    assert idempotency_key("th-1", notice(event_id=8)) != key


def test_the_signature_is_an_hmac_of_timestamp_and_body() -> None:
    body = b'{"kind": "approval"}'
    header = signature("k3y", 1700000000, body)
    t, v1 = (p.split("=", 1)[1] for p in header.split(","))
    assert t == "1700000000"
    assert v1 == hmac.new(b"k3y", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert signature("other", 1700000000, body) != header


def test_the_text_holds_the_essentials_for_a_chat_message() -> None:
    body = {
        "kind": "approval",
        "reminder": 2,
        "thread_id": "th-1",
        "task": "release",
        "version": "3",
        "step": "go",
        "asked": {"plan_hash": "abc123"},
        "who": ["carol", "dan"],
        "deadline": "2026-12-06T00:00:00+00:00",
        "page": "https://lt.example/threads/th-1",
        "command": "longtask approve th-1 go --db x --by carol --plan-hash abc123",
    }
    text = _text(body)
    assert text.splitlines()[0] == (
        "release v3, thread th-1 at step go waits for an approval (reminder 2)"
    )
    for part in ("abc123", "carol, dan", "2026-12-06", "https://lt.example/threads/th-1"):
        assert part in text
    assert f"`{body['command']}`" in text


def test_a_slack_incoming_webhook_gets_the_text_alone() -> None:
    body = {"kind": "failed", "text": "release v3, thread th-1 failed", "thread_id": "th-1"}
    slack = "https://hooks.slack.com/services/T000/B000/XXXX"
    assert payload_for(slack, body) == {"text": "release v3, thread th-1 failed"}
    assert payload_for("https://ops.example/hook", body) == body


@pytest.mark.parametrize(
    "address",
    [
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "2002:a00:1::",  # 6to4 of 10.0.0.1
        "64:ff9b::7f00:1",  # NAT64 (RFC 6052) of 127.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254 (a cloud's metadata service)
        "64:ff9b:1::a00:1",  # local-use NAT64 (RFC 8215) of 10.0.0.1
        "::7f00:1",  # IPv4-compatible 127.0.0.1
        "::ffff:7f00:1",  # IPv4-mapped 127.0.0.1
        "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
    ],
)
def test_an_ipv6_address_that_carries_a_private_ipv4_one_is_refused(
    address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LONGTASK_WEBHOOK_ALLOW", raising=False)
    assert not_public(address)
    with pytest.raises(ValueError, match="server-side request forgery"):
        resolve(f"http://[{address}]/hook")


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "2002:808:808::", "2606:4700::1111"])
def test_an_ipv6_address_that_carries_a_public_ipv4_one_is_public(address: str) -> None:
    assert not not_public(address)
