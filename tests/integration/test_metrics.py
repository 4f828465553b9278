"""``/metrics``, ``/ok`` and ``/ready`` of ``longtask serve`` on every backend (issue 42).

A scripted set of threads (steps that complete, one that fails, one retried, a model call,
an approval and a wait left waiting) is scraped through Starlette's TestClient and parsed
with prometheus_client's own parser; every value is checked against the thread's events and
records read through the Runner, not through the queries behind ``/metrics``."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from fakes import FakeOpenAI, Reply, by_turn
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel
from serve_access import AdminClient
from starlette.testclient import TestClient

from longtask import LongTask, Retry, Runner, Stage, StepContext, approval, function_step
from longtask import wait_for as wait_for_step
from longtask.model import Prompt, agent_step
from longtask.serve import create_app
from longtask.steps._prices import cost_of

TOKENS = {"tok-ops": "ops"}
OPS = {"Authorization": "Bearer tok-ops"}
MODEL = "gpt-4o-mini-2024-07-18"

TRIES: dict[str, int] = {}


@function_step
def prep(ctx: StepContext) -> int:
    return 1


@function_step(retry=Retry(max_attempts=3, initial_wait=0, jitter=False))
def flaky(ctx: StepContext) -> str:
    TRIES[ctx.thread_id] = TRIES.get(ctx.thread_id, 0) + 1
    if TRIES[ctx.thread_id] == 1:
        raise ConnectionResetError("the first try drops")  # transient: tried again
    return "second try"


FLOW = LongTask(
    "metrics_flow",
    stages=[
        Stage(
            "work",
            [
                prep,
                flaky,
                agent_step("writer", prompt=Prompt(name="w", version="1", template="Write.")),
            ],
        ),
        Stage("gate", [approval("sign_off", plan=lambda ctx: {"ship": True})]),
    ],
)


class Ci(BaseModel):
    passed: bool


CI = LongTask("metrics_ci", stages=[Stage("ci", [prep, wait_for_step("ci", schema=Ci)])])


@function_step
def boom(ctx: StepContext) -> None:
    raise ValueError("bad input: no retry")  # invalid input: fails at once


BROKEN = LongTask("metrics_broken", stages=[Stage("only", [prep, boom])])


@pytest.fixture
def runner(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:
    server = FakeOpenAI(by_turn([Reply.text("done", usage=(100, 20), model=MODEL)])).start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    TRIES.clear()  # each backend's flaky step fails its first try
    r = Runner(db_url)
    yield r
    r.close()
    server.stop()


def scrape(client: TestClient, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """The families of ``/metrics`` by name, each a dict of label tuples to values."""
    response = client.get("/metrics", headers=headers or {})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: dict[str, Any] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            out.setdefault(sample.name, {})[key] = sample.value
    return out


def labels(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


def test_metrics_match_the_database(runner: Runner) -> None:
    threads = {
        "flow": runner.start(FLOW, {}, thread_id="m-flow"),
        "ci": runner.start(CI, {}, thread_id="m-ci"),
    }
    with pytest.raises(Exception, match="bad input"):
        runner.start(BROKEN, {}, thread_id="m-broken")
    threads["broken"] = "m-broken"
    assert runner.status("m-flow").status == "waiting_user"
    assert runner.status("m-ci").status == "waiting_external"
    assert runner.status("m-broken").status == "failed"

    # What /metrics must say, read independently: the threads' own events and records.
    tasks = {"m-flow": "metrics_flow", "m-ci": "metrics_ci", "m-broken": "metrics_broken"}
    steps: Counter[tuple[str, str, str]] = Counter()
    kinds: Counter[str] = Counter()
    calls = []
    for thread, task in tasks.items():
        for e in runner.events(thread):
            kinds[e.kind] += 1
            if e.kind == "model.call":
                calls.append(e.data)
            if e.step is None:
                continue
            if e.kind in ("step.started", "step.completed", "step.failed"):
                steps[(task, e.step, e.kind.split(".")[1])] += 1
            elif e.kind == "step.retry" and e.data["outcome"] == "retry":
                steps[(task, e.step, "retried")] += 1
    assert steps[("metrics_flow", "flaky", "retried")] == 1
    assert steps[("metrics_broken", "boom", "failed")] == 1
    assert len(calls) == 1

    with AdminClient(create_app(runner, TOKENS)) as client:
        plain = TestClient(client.app)  # no token
        assert plain.get("/metrics").status_code == 401  # the reads' rule: a token
        assert client.get("/ok").json() == {"ok": True}
        ready = client.get("/ready")
        assert ready.status_code == 200, ready.text
        expected_checks = {"database": "ok", "schema": "ok"}
        if runner.db.url.scheme == "postgresql":
            expected_checks["queue"] = "ok"
        assert ready.json() == {"ready": True, "checks": expected_checks}
        m = scrape(client, OPS)

    assert m["longtask_database_up"][()] == 1
    for thread, task in tasks.items():
        status = runner.status(thread).status
        assert m["longtask_threads"][labels(task=task, status=status)] == 1
        assert m["longtask_threads"][labels(task=task, status="completed")] == 0

    for name in ("started", "completed", "failed", "retried"):
        got = {
            (dict(k)["task"], dict(k)["step"], name): v
            for k, v in m.get(f"longtask_steps_{name}", {}).items()
        }
        assert got == {k: v for k, v in steps.items() if k[2] == name}, name

    assert m["longtask_events_stored"] == {labels(kind=k): n for k, n in kinds.items()}

    # the pauses: one approval, one wait; their age counts from their request
    assert m["longtask_pauses_waiting"] == {
        labels(task="metrics_flow", kind="approval"): 1,
        labels(task="metrics_ci", kind="wait"): 1,
    }
    requested = {
        e.thread_id: e.ts.timestamp()
        for t in ("m-flow", "m-ci")
        for e in runner.events(t, kinds=["approval.required", "wait.started"])
    }
    now = time.time()
    for (task, kind), thread in {
        ("metrics_flow", "approval"): "m-flow",
        ("metrics_ci", "wait"): "m-ci",
    }.items():
        age = m["longtask_pause_oldest_age_seconds"][labels(task=task, kind=kind)]
        assert 0 <= age <= now - requested[thread] + 1.0

    # model calls by the model the server reported
    call = calls[0]
    assert call["model"] == MODEL
    assert m["longtask_model_calls"] == {labels(model=MODEL): 1}
    assert m["longtask_model_tokens"] == {
        labels(model=MODEL, direction="input"): 100,
        labels(model=MODEL, direction="output"): 20,
    }
    assert m["longtask_model_cost_dollars"][labels(model=MODEL)] == pytest.approx(
        cost_of(MODEL, 100, 20)
    )
    budget = runner.db.store.budget("m-flow")
    assert budget is not None
    assert m["longtask_budget_tokens"][labels(task="metrics_flow")] == budget.used["tokens"]

    # the duration histogram: one finished run of each step that ended, none of the pauses
    ended = {
        (task, step)
        for (task, step, name) in steps
        if name in ("completed", "failed") and steps[(task, step, name)]
    }
    counted = {
        (dict(k)["task"], dict(k)["step"]): v
        for k, v in m["longtask_step_duration_seconds_count"].items()
    }
    assert counted == dict.fromkeys(ended, 1)
    for (task, step), _ in counted.items():
        inf = m["longtask_step_duration_seconds_bucket"][labels(task=task, step=step, le="+Inf")]
        assert inf == 1


def test_ready_names_the_database_when_it_does_not_answer(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from urllib.parse import urlsplit

    import psycopg
    from fakes.tcp_proxy import TcpProxy

    monkeypatch.setenv("LONGTASK_DB_TIMEOUT", "3")
    url = urlsplit(pg_url)
    with TcpProxy(url.hostname or "127.0.0.1", url.port or 5432) as proxy:
        runner = Runner(proxy.url(pg_url))
        try:
            with AdminClient(create_app(runner, TOKENS, ready_timeout=0.5)) as client:
                assert client.get("/ready").status_code == 200
                proxy.freeze()  # the network path hangs: no answer
                frozen = client.get("/ready")
                assert frozen.status_code == 503
                assert frozen.json() == {
                    "ready": False,
                    "checks": {"database": "no answer within 0.5 s"},
                }
                assert client.get("/ok").status_code == 200  # the process itself is alive
                with pytest.raises(psycopg.OperationalError):
                    runner.db.store.get_thread("m-any")  # a statement of this process fails
                m = scrape(client)  # no stored-state series, but an answer that says so
                assert m["longtask_database_up"][()] == 0
                assert "longtask_threads" not in m
                assert m["longtask_metrics_read_errors_total"][()] == 1
                assert m["longtask_db_timeouts_total"][()] >= 1  # the read that gave up
                assert m["longtask_db_errors_total"][()] >= 1  # the statement that failed
                proxy.thaw()
                deadline = time.monotonic() + 30
                while client.get("/ready").status_code != 200:
                    assert time.monotonic() < deadline, "never ready again after the thaw"
                    time.sleep(0.1)
                proxy.stop()  # a stopped server: connections refused
                proxy.cut()
                down = client.get("/ready")
                assert down.status_code == 503
                assert list(down.json()["checks"]) == ["database"]
                assert "postgresql://" not in down.text  # names the part, not the URL
        finally:
            runner.close()


def test_ready_names_an_old_schema(sqlite_url: str) -> None:
    runner = Runner(sqlite_url)
    try:
        runner.db.store._run("UPDATE longtask_schema SET version = 3")
        with AdminClient(create_app(runner, TOKENS)) as client:
            r = client.get("/ready")
        assert r.status_code == 503
        assert r.json()["checks"]["database"] == "ok"
        assert "longtask db upgrade" in r.json()["checks"]["schema"]
    finally:
        runner.close()


def test_queue_jobs_waiting_for_a_worker(pg_url: str) -> None:
    """Threads submitted with no worker running: their jobs wait, and /metrics counts them
    as procrastinate's table holds them."""
    import psycopg

    runner = Runner(pg_url)
    try:
        submitted = time.time()
        for i in range(2):
            runner.submit(BROKEN, {}, thread_id=f"m-queued-{i}", task_ref="tests:broken")
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute(
                "SELECT queue_name, count(*) FROM procrastinate_jobs WHERE status = 'todo' "
                "GROUP BY queue_name"
            ).fetchall()
        assert rows == [("longtask", 2)]
        with AdminClient(create_app(runner, TOKENS)) as client:
            m = scrape(client)
        assert m["longtask_queue_jobs"] == {labels(queue="longtask", state="waiting"): 2}
        oldest = m["longtask_queue_oldest_wait_seconds"][labels(queue="longtask")]
        assert 0 <= oldest <= time.time() - submitted + 1.0  # (one clock: the same machine)
        assert m["longtask_threads"][labels(task="metrics_broken", status="pending")] == 2
    finally:
        runner.close()
