"""Notifications (issue 42) on every backend, with a real HTTP receiver on 127.0.0.1 (allowed
explicitly): a pause sends one notice holding what is asked, signed; its command works when
pasted; a receiver that is down gets it after it comes back; a process killed between the
pause's commit and the delivery leaves it owed, and ``longtask tick`` sends it with the same
idempotency key; an unanswered pause is told again after ``remind_after`` (on the runner's
injected clock); a loopback target is refused unless allowed; a receiver that hangs never
holds a thread back."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from fakes.dripper import Dripper

from longtask import LongTask, Notify, Runner, Stage, approval
from longtask.runtime._delivery import Failed, post
from longtask.runtime._notify import NotifyPolicy

TASKS = Path(__file__).parent / "notify_task.py"
SECRET = "notify-secret-42"
#: quick retries: a test waits fractions of a second for the next attempt
FAST = NotifyPolicy(attempts=50, backoff=0.05, max_wait=0.2, timeout=5.0, poll=0.05, linger=1.0)


class Receiver:
    """An HTTP server on 127.0.0.1 that keeps the headers and body of each POST (as they
    arrive); it can be down (nothing listens on its port), or hold each request until
    ``release`` is set."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self._server: ThreadingHTTPServer | None = None
        self.port = 0
        self.up()

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.got.append((dict(self.headers), body))
                receiver.arrived.set()
                receiver.release.wait(60)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def down(self) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
        self._server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/notify?token=tok-in-query"

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.got]

    def close(self) -> None:
        self.release.set()
        if self._server is not None:
            self.down()


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    monkeypatch.setenv("LONGTASK_WEBHOOK_ALLOW", "127.0.0.1")
    monkeypatch.setenv("LONGTASK_NOTIFY_SECRET", SECRET)
    monkeypatch.setenv("LONGTASK_BASE_URL", "https://longtask.example/")
    r = Receiver()
    monkeypatch.setenv("LONGTASK_NOTIFY", r.url)
    yield r
    r.close()


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    r.notifier.policy = FAST
    yield r
    r.close()


def until(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def load(name: str) -> LongTask:
    sys.path.insert(0, str(TASKS.parent))
    try:
        import notify_task

        task: LongTask = getattr(notify_task, name)
        return task
    finally:
        sys.path.remove(str(TASKS.parent))


def verify(headers: dict[str, str], body: bytes, secret: str = SECRET) -> bool:
    """The receiver's side of the signature, as the docs show it."""
    parts = dict(p.split("=", 1) for p in headers["X-Longtask-Signature"].split(","))
    expected = hmac.new(
        secret.encode(), parts["t"].encode() + b"." + body, hashlib.sha256
    ).hexdigest()
    return hmac.compare_digest(expected, parts["v1"])


def notes(runner: Runner, thread_id: str, kind: str) -> list[Any]:
    return [e for e in runner.events(thread_id) if e.kind == kind]


def notice_metrics(runner: Runner) -> dict[str, float]:
    """``longtask_notifications`` as ``/metrics`` reports it, by state."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from longtask.runtime._metrics import metrics_registry

    text = generate_latest(metrics_registry(runner.db)).decode()
    (family,) = [
        f for f in text_string_to_metric_families(text) if f.name == "longtask_notifications"
    ]
    return {s.labels["state"]: s.value for s in family.samples}


def settled(runner: Runner, thread_id: str) -> Any:
    (row,) = runner.db.store.notifications(thread_id)
    return row if row.state is not None else None


def paste(command: str, db_url: str) -> subprocess.CompletedProcess[str]:
    """Run a command a notice holds as a person pasting it would, in the directory of the
    task's code, with no database in the environment (the command names it)."""
    words = shlex.split(command)
    assert words[0] == "longtask" and "--db" in words
    return run_cli(*words[1:], db="sqlite:////nonexistent/wrong.db", cwd=TASKS.parent)


def test_a_pause_sends_one_signed_notice_whose_command_answers_it(
    runner: Runner, receiver: Receiver, db_url: str
) -> None:
    task = load("RELEASE")
    runner.start(task, thread_id="n-release")
    assert runner.status("n-release").status == "waiting_user"
    until(lambda: notes(runner, "n-release", "notify.sent"), "the notice to be sent")
    time.sleep(0.3)  # nothing more comes
    assert len(receiver.got) == 1
    headers, raw = receiver.got[0]
    assert verify(headers, raw)
    assert not verify(headers, raw, secret="another")
    assert headers["Idempotency-Key"].startswith("lt-")
    body = json.loads(raw)
    pending = runner.pending("n-release")[0].request
    assert body["kind"] == "approval"
    assert body["thread_id"] == "n-release"
    assert (body["task"], body["version"]) == ("notify_release", "1")
    assert (body["step"], body["stage"]) == ("release", "approve")
    assert body["asked"] == {
        "plan": {"deploy": "v2", "hosts": 3},
        "plan_hash": pending["plan_hash"],
    }
    assert body["who"] == ["carol"]
    assert body["deadline"] == pending["deadline"] and body["deadline"]
    assert body["page"] == "https://longtask.example/threads/n-release"
    assert pending["plan_hash"] in body["text"] and "n-release" in body["text"]
    assert body["command"] in body["text"]
    # The secret is in no event; the URL is shown without its query.
    sent = notes(runner, "n-release", "notify.sent")
    assert [e.data["url"] for e in sent] == [receiver.url.split("?")[0]]
    assert SECRET not in json.dumps([e.data for e in runner.events("n-release")])
    assert "tok-in-query" not in json.dumps([e.data for e in runner.events("n-release")])

    answered = paste(body["command"], db_url)
    assert answered.returncode == 0, answered.stdout + answered.stderr
    assert runner.status("n-release").status == "completed"
    # The other process ran the thread to its end: its notice came from there.
    until(lambda: len(receiver.got) == 2, "the notice of the end")
    done = receiver.bodies()[1]
    assert done["kind"] == "completed" and done["thread_id"] == "n-release"
    assert receiver.got[1][0]["Idempotency-Key"] != headers["Idempotency-Key"]


def test_a_wait_notice_shows_the_schema_and_an_example_the_command_sends(
    runner: Runner, receiver: Receiver, db_url: str
) -> None:
    runner.start(load("CALLBACK"), thread_id="n-wait")
    until(lambda: receiver.got, "the notice")
    body = receiver.bodies()[0]
    assert body["kind"] == "wait" and body["step"] == "callback"
    assert body["asked"]["schema"]["required"] == ["ok", "note"]
    assert body["asked"]["example"] == {"ok": True, "note": "..."}
    assert body["who"] is None
    answered = paste(body["command"], db_url)
    assert answered.returncode == 0, answered.stdout + answered.stderr
    assert runner.result("n-wait", "callback") == {"ok": True, "note": "..."}


def test_a_receiver_that_is_down_gets_the_notice_after_it_comes_back(
    runner: Runner, receiver: Receiver
) -> None:
    receiver.down()
    runner.start(load("RELEASE"), thread_id="n-down")
    failed = until(lambda: len(notes(runner, "n-down", "notify.failed")) >= 2, "failed attempts")
    assert failed
    first = notes(runner, "n-down", "notify.failed")[0].data
    assert first["final"] is False and first["retry_in"] is not None
    assert "tok-in-query" not in json.dumps(first)
    assert receiver.got == []
    receiver.up()
    until(lambda: notes(runner, "n-down", "notify.sent"), "the notice once it is back")
    assert len(receiver.got) == 1
    assert receiver.bodies()[0]["kind"] == "approval"
    # the event is stored before the row is settled (a kill between them sends again,
    # with the same key, and records the same event once)
    row = until(lambda: settled(runner, "n-down"), "the notice to be settled")
    assert row.state == "sent" and row.attempts >= 3


def test_a_process_killed_before_delivery_leaves_it_owed_and_tick_sends_it(
    receiver: Receiver, db_url: str
) -> None:
    # The receiver holds the first request: the process has committed the pause and is
    # delivering when it is killed.
    receiver.release.clear()
    env = {**os.environ, "LONGTASK_DB": db_url, "LONGTASK_NOTIFY_TIMEOUT": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "longtask", "run", f"{TASKS}:RELEASE", "--thread", "n-kill"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert receiver.arrived.wait(180), "the process never delivered"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    first_key = receiver.got[0][0]["Idempotency-Key"]
    receiver.release.set()
    with Runner(db_url) as reader:
        assert reader.status("n-kill").status == "waiting_user"
        assert notes(reader, "n-kill", "notify.sent") == []
        (row,) = reader.db.store.notifications("n-kill")
        assert row.state is None  # still owed

        def ticked() -> bool:
            got = run_cli("tick", db=db_url, env={"LONGTASK_NOTIFY_TIMEOUT": "1"})
            assert got.returncode == 0, got.stdout + got.stderr
            return bool(notes(reader, "n-kill", "notify.sent"))

        until(ticked, "tick to send the notice", timeout=90)
        assert settled(reader, "n-kill").state == "sent"
    assert len(receiver.got) == 2
    assert receiver.got[1][0]["Idempotency-Key"] == first_key
    assert receiver.got[1][1] != b"" and verify(*receiver.got[1])


def test_an_unanswered_pause_is_told_again_after_remind_after(
    db_url: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LONGTASK_NOTIFY")
    now = [datetime.now(UTC)]
    task = LongTask(
        "notify_remind",
        [Stage("ask", [approval("go", timeout=timedelta(days=3))])],
        notify=Notify(urls=[receiver.url], remind_after=timedelta(hours=4)),
    )
    with Runner(db_url, clock=lambda: now[0]) as runner:
        runner.notifier.policy = FAST
        runner.start(task, thread_id="n-remind")
        until(lambda: len(receiver.got) == 1, "the first notice")
        assert runner.deliver_notifications() == 0  # not yet: four hours have not passed
        now[0] += timedelta(hours=4, minutes=1)
        until(lambda: len(receiver.got) == 2, "the reminder")
        runner.deliver_notifications()
        assert len(receiver.got) == 2  # one reminder per remind_after
        now[0] += timedelta(hours=4, minutes=1)
        until(lambda: len(receiver.got) == 3, "the second reminder")
        bodies = receiver.bodies()
        assert [b["reminder"] for b in bodies] == [0, 1, 2]
        assert all(b["kind"] == "approval" and b["step"] == "go" for b in bodies)
        assert "reminder 1" in bodies[1]["text"]
        keys = [h["Idempotency-Key"] for h, _ in receiver.got]
        assert len(set(keys)) == 3
        # Answered: no more reminders, and the end is told.
        runner.approve("n-remind", "go", by="dana", task=task)
        until(lambda: len(receiver.got) == 4, "the notice of the end")
        now[0] += timedelta(hours=9)
        runner.deliver_notifications()
        time.sleep(0.2)
        assert [b["kind"] for b in receiver.bodies()] == ["approval"] * 3 + ["completed"]


def test_a_loopback_target_is_refused_unless_allowed(
    runner: Runner, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LONGTASK_WEBHOOK_ALLOW")
    runner.start(load("RELEASE"), thread_id="n-refused")
    failed = until(lambda: notes(runner, "n-refused", "notify.failed"), "the refusal")
    assert failed[0].data["final"] is True
    assert "LONGTASK_WEBHOOK_ALLOW" in failed[0].data["error"]
    assert "server-side request forgery" in failed[0].data["error"]
    row = until(lambda: settled(runner, "n-refused"), "the notice to be settled")
    assert row.state == "failed" and row.attempts == 1
    assert receiver.got == []

    monkeypatch.setenv("LONGTASK_WEBHOOK_ALLOW", "127.0.0.1")
    runner.start(load("RELEASE"), thread_id="n-allowed")
    until(lambda: notes(runner, "n-allowed", "notify.sent"), "the allowed notice")
    assert [b["thread_id"] for b in receiver.bodies()] == ["n-allowed"]
    until(lambda: settled(runner, "n-allowed"), "the notice to be settled")
    assert notice_metrics(runner) == {"owed": 0, "sent": 1, "failed": 1, "none": 0}


def test_a_hanging_receiver_never_holds_a_thread_back(runner: Runner, receiver: Receiver) -> None:
    receiver.release.clear()  # answers nothing until the test ends
    runner.notifier.policy = NotifyPolicy(timeout=30.0, poll=0.05, linger=0.1, threads=1)
    runner.start(load("RELEASE"), thread_id="n-hang")
    assert receiver.arrived.wait(180)
    # The notice is still in flight (its receiver holds it) while the thread goes on.
    runner.approve("n-hang", "release", by="carol")
    assert runner.status("n-hang").status == "completed"
    assert len(receiver.got) == 1
    assert notes(runner, "n-hang", "notify.sent") == []


def test_a_failure_is_told_with_the_error_and_the_command_that_retries(
    runner: Runner, receiver: Receiver, db_url: str
) -> None:
    from longtask.errors import StepFailed

    with pytest.raises(StepFailed):
        runner.start(load("BROKEN"), thread_id="n-broken")
    until(lambda: receiver.got, "the notice of the failure")
    time.sleep(0.2)
    (body,) = receiver.bodies()
    assert body["kind"] == "failed" and body["event"] == "longtask.failed"
    assert body["asked"]["error"]["step"] == "broken"
    assert "the release notes are empty" in body["asked"]["error"]["message"]
    assert shlex.split(body["command"])[:3] == ["longtask", "retry", "n-broken"]
    assert "failed" in body["text"]


@pytest.mark.parametrize("part", ["headers", "body"])
def test_an_attempt_is_bounded_as_a_whole_however_the_receiver_drips(
    part: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each byte comes well within the timeout; the attempt as a whole does not.
    monkeypatch.setenv("LONGTASK_WEBHOOK_ALLOW", "127.0.0.1")
    drip = Dripper(every=0.2, lasts=20.0, part=part)
    try:
        with pytest.raises(Failed, match=r"no answer within 1 s"):
            post(drip.url, b"{}", {"Content-Type": "application/json"}, timeout=1.0)
        until(lambda: drip.cut, "the receiver to see its connection closed")
        assert drip.finished == 0
    finally:
        drip.close()


def test_a_dripping_receiver_delays_only_its_own_notices(
    db_url: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LONGTASK_NOTIFY")
    drip = Dripper(every=0.2, lasts=300.0)

    def asking(name: str, *urls: str) -> LongTask:
        return LongTask(name, [Stage("ask", [approval("go")])], notify=Notify(urls=list(urls)))

    try:
        with Runner(db_url) as runner:
            runner.notifier.policy = NotifyPolicy(timeout=120.0, poll=0.05, linger=0.1, threads=2)
            # One notice to both (the dripping one first), two to the dripping one alone,
            # then one to the good one alone.
            runner.start(asking("notify_both", drip.url, receiver.url), thread_id="n-both")
            runner.start(asking("notify_drip", drip.url), thread_id="n-drip-1")
            runner.start(asking("notify_drip", drip.url), thread_id="n-drip-2")
            assert drip.connected.wait(60)
            runner.start(asking("notify_good", receiver.url), thread_id="n-good")
            until(
                lambda: {b["thread_id"] for b in receiver.bodies()} == {"n-both", "n-good"},
                "the good receiver's notices",
                timeout=60,
            )
            # ... while the dripping receiver still holds its first attempt (it gets one
            # at a time: its other notices wait for it, and only they do).
            assert len(drip.requests) == 1 and drip.cut == 0
            assert len(receiver.got) == 2
            sent = notes(runner, "n-both", "notify.sent")
            assert [e.data["url"] for e in sent] == [receiver.url.split("?")[0]]
            assert notes(runner, "n-both", "notify.failed") == []
    finally:
        drip.close()


def stored(runner: Runner, thread_id: str) -> list[Any]:
    """The receivers a thread and its notices hold in the database, as stored."""
    rows = runner.db.store._run(
        "SELECT notify_to FROM longtask_threads WHERE thread_id = ?", (thread_id,)
    )
    rows += runner.db.store._run(
        "SELECT receivers FROM longtask_notifications WHERE thread_id = ?", (thread_id,)
    )
    return [r[0] for r in rows]


def test_a_notice_goes_to_the_receivers_its_thread_was_configured_with(
    db_url: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = Receiver()
    try:
        # The process that runs the thread tells `receiver`, which is down: the notice
        # stays owed when it exits.
        receiver.down()
        slow = NotifyPolicy(attempts=50, backoff=3600.0, timeout=5.0, poll=0.05, linger=0.1)
        with Runner(db_url) as first:
            first.notifier.policy = slow
            first.start(load("RELEASE"), thread_id="n-owed")
            first.start(load("CALLBACK"), thread_id="n-old")
            until(lambda: notes(first, "n-owed", "notify.failed"), "a failed attempt")
            until(lambda: notes(first, "n-old", "notify.failed"), "a failed attempt")
            held = stored(first, "n-owed")
            assert all(receiver.url in h for h in held) and len(held) == 2
            # The signing key is named, never stored.
            assert all("LONGTASK_NOTIFY_SECRET" in h and SECRET not in h for h in held)
            # n-old's notice as a row stored before receivers were: no receivers
            first.db.store._run(
                "UPDATE longtask_notifications SET receivers = NULL WHERE thread_id = ?",
                ("n-old",),
            )
        receiver.up()
        # Another process, configured with `other` and without the signing key, delivers.
        monkeypatch.setenv("LONGTASK_NOTIFY", other.url)
        monkeypatch.delenv("LONGTASK_NOTIFY_SECRET")
        with Runner(db_url) as second:
            second.notifier.policy = slow
            second.db.store._run("UPDATE longtask_notifications SET due = 0 WHERE state IS NULL")
            second.deliver_notifications()
            # The thread's receivers check signatures: not sent unsigned.
            failed = notes(second, "n-owed", "notify.failed")[-1].data
            assert "LONGTASK_NOTIFY_SECRET" in failed["error"] and not failed["final"]
            assert receiver.got == []
            # The row from before goes where the delivering process is configured to.
            assert [b["thread_id"] for b in other.bodies()] == ["n-old"]

            monkeypatch.setenv("LONGTASK_NOTIFY_SECRET", SECRET)
            second.db.store._run("UPDATE longtask_notifications SET due = 0 WHERE state IS NULL")
            second.deliver_notifications()
            until(lambda: receiver.got, "the notice at the thread's receiver")
        assert [b["thread_id"] for b in receiver.bodies()] == ["n-owed"]
        assert verify(*receiver.got[0])
        assert [b["thread_id"] for b in other.bodies()] == ["n-old"]
    finally:
        other.close()
