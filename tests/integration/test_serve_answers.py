"""Answers sent to ``longtask serve`` at once or with odd text (issue 28, items 6 and 7), on
every backend: of concurrent approvals exactly one is recorded (202) and the rest are 409;
an answer whose text cannot be stored is refused before anything is, the thread unchanged."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from serve_access import AdminClient
from starlette.testclient import TestClient

from longtask import LongTask, Runner, Stage, StepContext, approval, function_step, wait_for
from longtask.serve import create_app

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
HEADERS = [{"Authorization": "Bearer tok-alice"}, {"Authorization": "Bearer tok-bob"}]

#: the file the step after the approval waits for: the first answer's run stays open
GATE: dict[str, Path] = {}


@function_step
def held(ctx: StepContext) -> str:
    deadline = time.monotonic() + 30
    while not GATE["path"].exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return f"through for {ctx.result('go')['by']}"


HELD = LongTask(
    "serve_answers_held",
    stages=[
        Stage("approve", [approval("go", plan=lambda ctx: {"go": 1}, approvers=["alice", "bob"])]),
        Stage("work", [held]),
    ],
)


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    with AdminClient(create_app(runner, TOKENS, poll=0.02)) as c:
        yield c


def finished(runner: Runner, run_id: str) -> str:
    deadline = time.monotonic() + 60
    while True:
        run = runner.db.store.api_run(run_id)
        assert run is not None
        if run.status in ("success", "error", "interrupted"):
            return run.status
        assert time.monotonic() < deadline, f"run {run_id} did not finish"
        time.sleep(0.02)


def test_ten_concurrent_approvals_record_exactly_one(
    runner: Runner, client: TestClient, tmp_path: Path
) -> None:
    GATE["path"] = tmp_path / "gate"
    runner.start(HELD, {}, thread_id="race-1")
    start = threading.Barrier(10)
    answers: list[Any] = []

    def approve(i: int) -> None:
        start.wait()
        answers.append(client.post("/api/threads/race-1/approve", headers=HEADERS[i % 2]))

    workers = [threading.Thread(target=approve, args=(i,)) for i in range(10)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    codes = sorted(r.status_code for r in answers)
    assert codes == [202] + [409] * 9, [r.text for r in answers]
    GATE["path"].write_text("open")
    (won,) = [r for r in answers if r.status_code == 202]
    assert finished(runner, won.json()["run_id"]) == "success"
    runs = runner.db.store.api_runs("race-1", limit=50)
    assert [r.status for r in runs] == ["success"]
    assert runner.status("race-1").status == "completed"
    assert len(runner.events("race-1", kinds=["approval.resolved"])) == 1


class Ci(BaseModel):
    note: str


@function_step
def after_ci(ctx: StepContext) -> str:
    return ctx.result("ci", Ci).note


ASKS = LongTask(
    "serve_answers_asks",
    stages=[
        Stage("approve", [approval("go", plan=lambda ctx: {"go": 1}, approvers=["alice", "bob"])]),
        Stage("ci", [wait_for("ci", schema=Ci)]),
        Stage("done", [after_ci]),
    ],
)


def snapshot(runner: Runner, thread: str) -> tuple[Any, ...]:
    st = runner.status(thread)
    return (st.status, st.checkpoint_id, st.runs, st.waiting, len(runner.events(thread)))


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        ("approve", {"comment": "\ud800"}, "the answer['comment'] (character 0: '\\ud800')"),
        ("reject", {"comment": "ok \udcff"}, "the answer['comment'] (character 3"),
        ("signal", {"name": "ci", "payload": {"note": "\udcff"}}, "the answer['note']"),
        ("signal", {"name": "ci", "payload": {"\ud800": "x"}}, "the answer key"),
    ],
)
def test_an_answer_with_text_that_cannot_be_stored_is_refused(
    runner: Runner, client: TestClient, path: str, body: dict[str, Any], fragment: str
) -> None:
    runner.start(ASKS, {}, thread_id="odd-1")
    if path == "signal":
        runner.approve("odd-1", by="alice")
        assert runner.status("odd-1").status == "waiting_external"
    before = snapshot(runner, "odd-1")
    # As a client sends it: JSON escapes (\ud800), which the server's parser turns into
    # a lone surrogate.
    sent = json.dumps(body).encode("ascii")
    headers = {**HEADERS[0], "Content-Type": "application/json"}
    r = client.post(f"/api/threads/odd-1/{path}", content=sent, headers=headers)
    assert r.status_code == 409, r.text  # as every answer the pause refuses
    assert fragment in r.json()["error"], r.json()["error"]
    assert "not valid Unicode text" in r.json()["error"]
    assert snapshot(runner, "odd-1") == before
    assert runner.db.store.api_runs("odd-1") == []
    # The refusal changed nothing: a good answer still goes through.
    good = {"name": "ci", "payload": {"note": "fine"}} if path == "signal" else {}
    r = client.post(f"/api/threads/odd-1/{path}", json=good, headers=HEADERS[0])
    assert r.status_code == 202, r.text
