"""Run webhooks of the LangGraph Server API, on every backend: the official SDK (over the
app in process) creates runs with ``webhook``; a real HTTP receiver on 127.0.0.1 gets the
run when it ends, once, with LangGraph's payload and an idempotency key; a receiver that is
down gets it after it comes back, and one a ``serve`` that stopped still owed it gets it
when ``serve`` starts again; a loopback URL is refused unless allowed; a hanging receiver
delays neither the run nor the API."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk.client import SyncLangGraphClient
from serve_access import AdminClient
from starlette.testclient import TestClient

from longtask import Runner
from longtask.serve import create_app
from longtask.serve._registry import assistant_id, load_registry
from longtask.serve._webhooks import WebhookPolicy

LG_TASKS = Path(__file__).parents[1] / "acceptance" / "lg_task.py"
TASKS = [f"{LG_TASKS}:SLEEPY", f"{LG_TASKS}:RELEASE"]
TOKENS = {"tok-alice": "alice"}
#: quick retries, so a test waits fractions of a second for the next attempt
FAST = WebhookPolicy(attempts=50, backoff=0.05, max_wait=0.2, timeout=5.0, poll=0.05)
SECRET = "s3cret-token"


class Receiver:
    """An HTTP server on 127.0.0.1 that keeps what is POSTed to it; it can be down (nothing
    listens on its port), or hold each request until ``release`` is set."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.release.set()
        #: the status it answers with
        self.status = 200
        self._server: ThreadingHTTPServer | None = None
        self.port = 0
        self.up()

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.arrived.set()
                receiver.release.wait(60)
                receiver.got.append((dict(self.headers), json.loads(body)))
                self.send_response(receiver.status)
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
        return f"http://127.0.0.1:{self.port}/hook?token={SECRET}"

    def close(self) -> None:
        self.release.set()
        if self._server is not None:
            self.down()


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    monkeypatch.setenv("LONGTASK_WEBHOOK_ALLOW", "127.0.0.1")
    monkeypatch.setenv("LT_SLEEPY", "0")
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


def app_client(runner: Runner, policy: WebhookPolicy = FAST) -> TestClient:
    return AdminClient(create_app(runner, TOKENS, registry=load_registry(TASKS), webhooks=policy))


def sdk(client: TestClient) -> SyncLangGraphClient:
    client.headers["X-Api-Key"] = "tok-alice"
    return SyncLangGraphClient(client)


def until(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def ended(lg: SyncLangGraphClient, thread_id: str, run_id: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        run = lg.runs.get(thread_id, run_id)
        return dict(run) if run["status"] not in ("pending", "running") else None

    return dict(until(check, "the run to end"))


def webhook_metrics(runner: Runner) -> dict[str, float]:
    """``longtask_run_webhooks`` as ``/metrics`` reports it, by state."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from longtask.runtime._metrics import metrics_registry

    text = generate_latest(metrics_registry(runner.db)).decode()
    (family,) = [
        f for f in text_string_to_metric_families(text) if f.name == "longtask_run_webhooks"
    ]
    return {s.labels["state"]: s.value for s in family.samples}


def notes(runner: Runner, thread_id: str, kind: str) -> list[Any]:
    return [e for e in runner.events(thread_id) if e.kind == kind]


def test_a_run_that_ends_is_posted_once_with_the_run_and_its_values(
    runner: Runner, receiver: Receiver
) -> None:
    with app_client(runner) as client:
        lg = sdk(client)
        thread = lg.threads.create()["thread_id"]
        run = lg.runs.create(thread, "lg_sleepy", input={}, webhook=receiver.url)
        # The run shows where it is POSTed, without the URL's query string.
        assert run["kwargs"]["webhook"] == f"http://127.0.0.1:{receiver.port}/hook"
        assert ended(lg, thread, run["run_id"])["status"] == "success"
        until(lambda: notes(runner, thread, "notify.sent"), "notify.sent")
        # A run without a webhook posts nothing.
        plain = lg.threads.create()["thread_id"]
        ended(lg, plain, lg.runs.create(plain, "lg_sleepy", input={})["run_id"])

    assert len(receiver.got) == 1
    headers, body = receiver.got[0]
    assert headers["Idempotency-Key"] == run["run_id"]
    assert headers["Content-Type"] == "application/json"
    # LangGraph's payload: the run object, its status, start and end, the thread's values.
    assert body["run_id"] == run["run_id"] and body["thread_id"] == thread
    assert body["assistant_id"] == assistant_id("lg_sleepy")
    assert body["status"] == "success"
    assert body["values"] == {"nap1": "nap1", "nap2": "nap2", "nap3": "nap3"}
    for key in ("created_at", "updated_at", "run_started_at", "run_ended_at", "webhook_sent_at"):
        assert isinstance(body[key], str), key
    assert body["run_started_at"] <= body["run_ended_at"] <= body["webhook_sent_at"]
    assert "error" not in body and "kwargs" in body and "metadata" in body

    sent = notes(runner, thread, "notify.sent")
    assert len(sent) == 1 and sent[0].attempt == 1
    assert sent[0].data["url"] == f"http://127.0.0.1:{receiver.port}/hook"
    assert sent[0].data["http_status"] == 200
    assert not notes(runner, thread, "notify.failed")
    assert SECRET not in json.dumps([e.data for e in runner.events(thread)])
    assert runner.db.store.api_webhook_state(run["run_id"]) == ("sent", 1)


def test_a_cancelled_run_is_posted_as_interrupted(
    runner: Runner, receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LT_SLEEPY_GATE", str(tmp_path / "gate"))
    with app_client(runner) as client:
        lg = sdk(client)
        thread = lg.threads.create()["thread_id"]
        run = lg.runs.create(thread, "lg_sleepy", input={}, webhook=receiver.url)
        until(lambda: runner.db.store.get_thread(thread), "the run to start")
        lg.runs.cancel(thread, run["run_id"])
        (tmp_path / "gate").touch()
        assert ended(lg, thread, run["run_id"])["status"] == "interrupted"
        until(lambda: notes(runner, thread, "notify.sent"), "notify.sent")
    assert [b["status"] for _, b in receiver.got] == ["interrupted"]


def test_a_receiver_that_is_down_gets_the_run_after_it_comes_back(
    runner: Runner, receiver: Receiver
) -> None:
    receiver.down()
    with app_client(runner) as client:
        lg = sdk(client)
        thread = lg.threads.create()["thread_id"]
        run = lg.runs.create(thread, "lg_sleepy", input={}, webhook=receiver.url)
        # The run ends on time; its delivery fails, and is tried again.
        assert ended(lg, thread, run["run_id"])["status"] == "success"
        until(lambda: len(notes(runner, thread, "notify.failed")) >= 2, "two failed attempts")
        assert webhook_metrics(runner)["owed"] == 1
        receiver.up()
        until(lambda: notes(runner, thread, "notify.sent"), "notify.sent")
        assert webhook_metrics(runner) == {"owed": 0, "sent": 1, "failed": 0}

    assert [h["Idempotency-Key"] for h, _ in receiver.got] == [run["run_id"]]
    failed = notes(runner, thread, "notify.failed")
    assert all(not e.data["final"] and e.data["retry_in"] > 0 for e in failed)
    assert [e.attempt for e in failed] == list(range(1, len(failed) + 1))
    assert notes(runner, thread, "notify.sent")[0].attempt == len(failed) + 1
    assert SECRET not in json.dumps([e.data for e in runner.events(thread)])


def test_a_receiver_that_refuses_the_request_is_not_asked_again(
    runner: Runner, receiver: Receiver
) -> None:
    receiver.status = 404
    with app_client(runner) as client:
        lg = sdk(client)
        thread = lg.threads.create()["thread_id"]
        run = lg.runs.create(thread, "lg_sleepy", input={}, webhook=receiver.url)
        ended(lg, thread, run["run_id"])
        until(
            lambda: runner.db.store.api_webhook_state(run["run_id"])[0] == "failed",
            "the delivery to be given up",
        )
    assert len(receiver.got) == 1
    (failed,) = notes(runner, thread, "notify.failed")
    assert failed.data["error"] == "HTTP 404" and failed.data["final"]


def test_credentials_in_the_url_are_sent_as_basic_auth_and_shown_nowhere(
    runner: Runner, receiver: Receiver
) -> None:
    url = receiver.url.replace("http://", "http://hook-user:pw-secret@")
    with app_client(runner) as client:
        lg = sdk(client)
        thread = lg.threads.create()["thread_id"]
        run = lg.runs.create(thread, "lg_sleepy", input={}, webhook=url)
        ended(lg, thread, run["run_id"])
        until(lambda: notes(runner, thread, "notify.sent"), "notify.sent")
        shown = json.dumps([lg.runs.get(thread, run["run_id"]), lg.runs.list(thread)])
    headers, body = receiver.got[0]
    assert headers["Authorization"] == "Basic aG9vay11c2VyOnB3LXNlY3JldA=="
    for secret in ("pw-secret", "hook-user", SECRET):
        assert secret not in shown
        assert secret not in json.dumps(body)
        assert secret not in json.dumps([e.data for e in runner.events(thread)])


def test_a_receiver_that_speaks_no_http_is_a_failed_attempt(
    runner: Runner, receiver: Receiver
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def answer() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                with conn:
                    conn.recv(65536)
                    conn.sendall(b"nonsense\r\n\r\n")

        threading.Thread(target=answer, daemon=True).start()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
        policy = WebhookPolicy(attempts=2, backoff=0.01, max_wait=0.01, timeout=5.0, poll=0.05)
        with app_client(runner, policy) as client:
            lg = sdk(client)
            thread = lg.threads.create()["thread_id"]
            run = lg.runs.create(thread, "lg_sleepy", input={}, webhook=url)
            ended(lg, thread, run["run_id"])
            until(
                lambda: runner.db.store.api_webhook_state(run["run_id"]) == ("failed", 2),
                "the delivery to be given up",
            )
    failed = notes(runner, thread, "notify.failed")
    assert [e.attempt for e in failed] == [1, 2]
    assert "BadStatusLine" in failed[0].data["error"]


def test_a_delivery_is_given_up_after_its_attempts(runner: Runner, receiver: Receiver) -> None:
    receiver.down()
    policy = WebhookPolicy(attempts=2, backoff=0.01, max_wait=0.01, timeout=5.0, poll=0.05)
    with app_client(runner, policy) as client:
        lg = sdk(client)
        thread = lg.threads.create()["thread_id"]
        run = lg.runs.create(thread, "lg_sleepy", input={}, webhook=receiver.url)
        ended(lg, thread, run["run_id"])
        until(
            lambda: runner.db.store.api_webhook_state(run["run_id"]) == ("failed", 2),
            "the delivery to be given up",
        )
    failed = notes(runner, thread, "notify.failed")
    assert [(e.attempt, e.data["final"]) for e in failed] == [(1, False), (2, True)]
    assert failed[-1].data["retry_in"] is None
    assert webhook_metrics(runner) == {"owed": 0, "sent": 0, "failed": 1}


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost:9/hook",
        "http://[::1]:9/hook",
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::ffff:127.0.0.1]:9/hook",
        "http://0.0.0.0:9/hook",
        # IPv6 forms that carry 127.0.0.1: 6to4, NAT64, IPv4-compatible
        "http://[2002:7f00:1::]:9/hook",
        "http://[64:ff9b::7f00:1]:9/hook",
        "http://[::7f00:1]:9/hook",
    ],
)
def test_a_loopback_or_private_url_is_refused_unless_allowed(
    runner: Runner, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LONGTASK_WEBHOOK_ALLOW", raising=False)
    with app_client(runner) as client:
        thread = client.post("/threads", json={}, headers={"X-Api-Key": "tok-alice"})
        thread_id = thread.json()["thread_id"]
        body = {"assistant_id": "lg_sleepy", "input": {}, "webhook": url}
        got = client.post(f"/threads/{thread_id}/runs", json=body, headers=client_key())
        assert got.status_code == 422, got.text
        assert "LONGTASK_WEBHOOK_ALLOW" in got.json()["detail"]
        assert "server-side request forgery" in got.json()["detail"]
        # Nothing recorded: no run, no thread started, and no thread for a stateless run.
        assert client.get(f"/threads/{thread_id}/runs").json() == []
        assert runner.db.store.get_thread(thread_id) is None
        before = len(runner.db.store.api_threads())
        assert client.post("/runs", json=body, headers=client_key()).status_code == 422
        assert len(runner.db.store.api_threads()) == before

        monkeypatch.setenv("LONGTASK_WEBHOOK_ALLOW", "*")
        body["webhook"] = url.replace("/hook", "/hook?key=1")
        ok = client.post(f"/threads/{thread_id}/runs", json=body, headers=client_key())
        assert ok.status_code == 200, ok.text
        assert "key=1" not in json.dumps(ok.json())


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://example.org/hook", "http or https"),
        ("/runs/hook", "http or https"),
        ("http:///hook", "http or https"),
        (42, "http or https"),
        ("http://127.0.0.1:notaport/", "not a URL"),
        ("https://" + "a" * 5000 + ".org/", "longer than"),
    ],
)
def test_a_malformed_webhook_is_a_422_naming_it(runner: Runner, url: Any, says: str) -> None:
    with app_client(runner) as client:
        body = {"assistant_id": "lg_sleepy", "input": {}, "webhook": url}
        got = client.post("/runs", json=body, headers=client_key())
        assert got.status_code == 422, got.text
        assert "webhook" in got.json()["detail"] and says in got.json()["detail"]


def client_key() -> dict[str, str]:
    return {"X-Api-Key": "tok-alice"}


def test_a_hanging_receiver_delays_neither_runs_nor_the_api(
    runner: Runner, receiver: Receiver
) -> None:
    receiver.release.clear()  # every request is held until the test releases it
    policy = WebhookPolicy(attempts=5, backoff=0.05, max_wait=0.2, timeout=60.0, poll=0.05)
    with app_client(runner, policy) as client:
        lg = sdk(client)
        thread = lg.threads.create()["thread_id"]
        run = lg.runs.create(thread, "lg_sleepy", input={}, webhook=receiver.url)
        assert ended(lg, thread, run["run_id"])["status"] == "success"
        assert receiver.arrived.wait(60), "the delivery never reached the receiver"
        # While the receiver holds the delivery: other runs start and end, one with a
        # webhook to the same receiver too.
        plain = lg.threads.create()["thread_id"]
        again = lg.runs.create(plain, "lg_sleepy", input={})
        assert ended(lg, plain, again["run_id"])["status"] == "success"
        other = lg.threads.create()["thread_id"]
        third = lg.runs.create(other, "lg_sleepy", input={}, webhook=receiver.url)
        assert ended(lg, other, third["run_id"])["status"] == "success"
        assert not receiver.got and not receiver.release.is_set()  # still held
        receiver.release.set()
        until(lambda: len(receiver.got) >= 2, "both deliveries")
    assert sorted(h["Idempotency-Key"] for h, _ in receiver.got) == sorted(
        [run["run_id"], third["run_id"]]
    )


def test_a_slow_receiver_times_out_and_is_tried_again(runner: Runner, receiver: Receiver) -> None:
    receiver.release.clear()
    policy = WebhookPolicy(attempts=5, backoff=0.05, max_wait=0.2, timeout=0.5, poll=0.05)
    with app_client(runner, policy) as client:
        lg = sdk(client)
        thread = lg.threads.create()["thread_id"]
        run = lg.runs.create(thread, "lg_sleepy", input={}, webhook=receiver.url)
        ended(lg, thread, run["run_id"])
        failed = until(lambda: notes(runner, thread, "notify.failed"), "a timed-out attempt")
        assert "no answer within 0.5 s" in failed[0].data["error"]
        receiver.release.set()
        until(lambda: notes(runner, thread, "notify.sent"), "notify.sent")
    # The same key on every attempt: the receiver may have acted on the held one too.
    assert {h["Idempotency-Key"] for h, _ in receiver.got} == {run["run_id"]}


def test_serve_delivers_what_a_serve_that_stopped_still_owed(
    runner: Runner, receiver: Receiver
) -> None:
    store = runner.db.store
    sleepy = assistant_id("lg_sleepy")
    start = {"kind": "start", "graph": "lg_sleepy", "input": {}, "stream_mode": ["values"]}
    # A run recorded and never taken: serve died right after answering the request.
    store.api_thread_put("never-taken", {})
    store.api_run_create(
        "run-open", "never-taken", sleepy, dict(start), "alice", None, webhook=receiver.url
    )
    # A run whose end was recorded, its delivery not made: serve died in between.
    store.api_thread_put("ended", {})
    store.api_run_create(
        "run-ended", "ended", sleepy, dict(start), "alice", None, webhook=receiver.url
    )
    assert store.api_run_claim("run-ended", "pending")
    store.api_run_set("run-ended", "error", "the thread failed", values={"kept": True})
    # A delivery a serve was making when it died: found due when its claim lapses.
    store.api_thread_put("claimed", {})
    store.api_run_create(
        "run-claimed", "claimed", sleepy, dict(start), "alice", None, webhook=receiver.url
    )
    assert store.api_run_claim("run-claimed", "pending")
    store.api_run_set("run-claimed", "success", values={})
    assert store.api_webhook_claim("run-claimed", time.time(), time.time() + 1) is not None

    # And one that a first serve could not deliver (its receiver was down) before it stopped.
    receiver.down()
    with app_client(runner) as client:
        lg = sdk(client)
        thread = lg.threads.create()["thread_id"]
        run = lg.runs.create(thread, "lg_sleepy", input={}, webhook=receiver.url)
        ended(lg, thread, run["run_id"])
        until(lambda: notes(runner, thread, "notify.failed"), "a failed attempt")
    assert store.api_webhook_state(run["run_id"])[0] is None  # still owed
    receiver.up()

    with app_client(runner):
        for run_id in ("run-open", "run-ended", "run-claimed", run["run_id"]):
            until(lambda r=run_id: store.api_webhook_state(r)[0] == "sent", f"{run_id} delivered")
    got = {h["Idempotency-Key"]: b for h, b in receiver.got}
    assert sorted(got) == sorted(["run-open", "run-ended", "run-claimed", run["run_id"]])
    assert len(receiver.got) == 4
    assert got["run-open"]["status"] == "success"
    assert got["run-open"]["values"] == {"nap1": "nap1", "nap2": "nap2", "nap3": "nap3"}
    # The values kept when the run ended, not the thread's values at delivery.
    assert got["run-ended"]["values"] == {"kept": True}
    assert got["run-ended"]["error"] == {"error": "RunError", "message": "the thread failed"}
    assert got["run-ended"]["status"] == "error"
