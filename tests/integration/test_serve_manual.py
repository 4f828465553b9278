"""Retry, skip and results through the HTTP API of ``longtask serve`` (issue 29, item 11),
and the commands its error bodies print (item 2), on every backend.

A retry or skip is checked in the request with the Runner's own checks, refused without a
valid token (who acts is the token's name, never the body's), and carried out by serve's
executor; a refused one changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from serve_access import AdminClient
from starlette.testclient import TestClient

from longtask import LongTask, Retry, Runner, Stage, StepContext, function_step, wait_for
from longtask.serve import create_app

TOKENS = {"tok-alice": "alice"}
ALICE = {"Authorization": "Bearer tok-alice"}

#: whether ``flaky`` fails (the tests flip it to let a retry through)
FLAKY = {"fail": True}


@function_step(retry=Retry(max_attempts=1))
def flaky(ctx: StepContext) -> str:
    if FLAKY["fail"]:
        raise ValueError("the upstream said no")
    return "fetched"


@function_step
def report(ctx: StepContext) -> dict[str, Any]:
    # Markup in a result: the page must show it as text (checked in the browser test).
    return {"fetched": ctx.result("flaky"), "note": "<b>bold</b> & done"}


FLAKY_TASK = LongTask(
    "serve_flaky",
    stages=[Stage("fetch", [flaky]), Stage("report", [report])],
)

WAITING = LongTask("serve_waiting", stages=[Stage("ci", [wait_for("ci")])])


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    FLAKY["fail"] = True
    r = Runner(db_url)
    yield r
    r.close()


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    with AdminClient(create_app(runner, TOKENS, poll=0.02)) as c:
        yield c


def failed(runner: Runner, thread: str = "flaky-1") -> str:
    with pytest.raises(Exception, match="the upstream said no"):
        runner.start(FLAKY_TASK, {}, thread_id=thread)
    assert runner.status(thread).status == "failed"
    return thread


def carried_out(runner: Runner, response: Any) -> str:
    assert response.status_code == 202, response.text
    run_id = response.json()["run_id"]
    deadline = time.monotonic() + 60
    while True:
        run = runner.db.store.api_run(run_id)
        assert run is not None
        if run.status in ("success", "error", "interrupted"):
            return runner.status(response.json()["thread_id"]).status
        assert time.monotonic() < deadline, f"run {run_id} did not finish"
        time.sleep(0.02)


def snapshot(runner: Runner, thread: str) -> tuple[Any, ...]:
    st = runner.status(thread)
    return (st.status, st.checkpoint_id, st.runs, st.error, len(runner.events(thread)))


def test_retry_runs_the_failed_step_again_as_the_tokens_name(
    runner: Runner, client: TestClient
) -> None:
    thread = failed(runner)
    before = snapshot(runner, thread)
    for headers in ({}, {"Authorization": "Bearer nope"}):
        refused = TestClient(client.app).post(
            f"/api/threads/{thread}/retry", json={}, headers=headers
        )
        assert refused.status_code == 401
    by = client.post(f"/api/threads/{thread}/retry", json={"by": "mallory"}, headers=ALICE)
    assert by.status_code == 400 and "bearer token" in by.json()["error"]
    wrong = client.post(f"/api/threads/{thread}/retry", json={"step": "report"}, headers=ALICE)
    assert wrong.status_code == 409
    assert "the failed step is 'flaky'" in wrong.json()["error"]
    assert snapshot(runner, thread) == before

    FLAKY["fail"] = False
    ok = client.post(f"/api/threads/{thread}/retry", json={"step": "flaky"}, headers=ALICE)
    assert carried_out(runner, ok) == "completed"
    [event] = runner.events(thread, kinds=["manual.retry"])
    assert (event.step, event.data["by"]) == ("flaky", "alice")

    # The final results, as `longtask result` gives them: the last stage's.
    results = client.get(f"/api/threads/{thread}/results").json()
    assert results == {
        "status": "completed",
        "final": True,
        "results": {"report": {"fetched": "fetched", "note": "<b>bold</b> & done"}},
    }
    every = client.get(f"/api/threads/{thread}/results?all=1").json()
    assert set(every["results"]) == {"flaky", "report"}

    # Nothing to retry now; the message's command names this database.
    again = client.post(f"/api/threads/{thread}/retry", json={}, headers=ALICE)
    assert again.status_code == 409
    assert f"`longtask status {thread} --db " in again.json()["error"]


def test_skip_marks_the_step_done_with_the_given_result(runner: Runner, client: TestClient) -> None:
    thread = failed(runner)
    before = snapshot(runner, thread)
    no_token = TestClient(client.app).post(f"/api/threads/{thread}/skip", json={"step": "flaky"})
    assert no_token.status_code == 401
    for body, status, text in (
        ({"step": "nope", "result": 1}, 409, "has no step 'nope'"),
        ({"step": "report"}, 409, "cannot be skipped yet: it waits for flaky"),
        ({"result": "x"}, 400, "step"),
        ({"step": "flaky", "extra": 1}, 400, "extra"),
    ):
        r = client.post(f"/api/threads/{thread}/skip", json=body, headers=ALICE)
        assert r.status_code == status, r.text
        assert text in r.json()["error"], r.text
    # A lone surrogate, as JSON may spell it: no UTF-8 form, so the database could not store it.
    surrogate = client.post(
        f"/api/threads/{thread}/skip",
        content=b'{"step": "flaky", "result": "\\ud800"}',
        headers={**ALICE, "Content-Type": "application/json"},
    )
    assert surrogate.status_code == 409 and "the result" in surrogate.json()["error"]
    assert snapshot(runner, thread) == before

    ok = client.post(
        f"/api/threads/{thread}/skip", json={"step": "flaky", "result": "cached"}, headers=ALICE
    )
    assert carried_out(runner, ok) == "completed"
    assert runner.result(thread, "report")["fetched"] == "cached"
    [event] = runner.events(thread, kinds=["manual.skip"])
    assert (event.step, event.data["by"]) == ("flaky", "alice")


def test_a_wait_cannot_be_skipped_and_a_bad_payload_changes_nothing(
    runner: Runner, client: TestClient
) -> None:
    runner.start(WAITING, {}, thread_id="w-1")
    before = snapshot(runner, "w-1")
    skip = client.post("/api/threads/w-1/skip", json={"step": "ci"}, headers=ALICE)
    assert skip.status_code == 409
    assert "answer it with `longtask signal" in skip.json()["error"]
    retry = client.post("/api/threads/w-1/retry", json={}, headers=ALICE)
    assert retry.status_code == 409
    bad_token = client.post(
        "/api/threads/w-1/signal",
        json={"name": "ci", "payload": "passed"},
        headers={"Authorization": "Bearer nope"},
    )
    assert bad_token.status_code == 401
    not_json = client.post(
        "/api/threads/w-1/signal",
        content=b'{"name": "ci", "payload": ',
        headers={**ALICE, "Content-Type": "application/json"},
    )
    assert not_json.status_code == 400
    assert snapshot(runner, "w-1") == before
    assert runner.status("w-1").status == "waiting_external"


def test_favicon_is_served(client: TestClient) -> None:
    r = client.get("/favicon.ico")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("image/svg+xml")
    page = client.get("/", headers={"Accept": "text/html"})
    assert '<link rel="icon" href="/favicon.ico"' in page.text


def test_a_retry_of_a_thread_served_by_workers_is_queued_for_them(pg_url: str) -> None:
    from longtask.runtime._queue import serve_thread

    FLAKY["fail"] = True
    with Runner(pg_url) as caller, Runner(pg_url, worker="w-test") as worker:
        ref = "test_serve_manual:FLAKY_TASK"
        thread = caller.submit(FLAKY_TASK, {}, thread_id="flaky-w", task_ref=ref)
        with pytest.raises(Exception, match="the upstream said no"):
            serve_thread(worker, thread)
        assert caller.status(thread).status == "failed"
        FLAKY["fail"] = False
        with AdminClient(create_app(caller, TOKENS)) as client:
            r = client.post(f"/api/threads/{thread}/retry", json={}, headers=ALICE)
            assert r.status_code == 202, r.text
            assert r.json()["run_id"] is None  # not serve's to carry out
            assert caller.db.store.inbox_peek(thread)
            assert caller.db.store.api_runs(thread) == []
        serve_thread(worker, thread)
        assert caller.status(thread).status == "completed"
