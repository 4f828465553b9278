"""More of the LangGraph Server API on both backends (issue 43): ``threads.copy``,
``threads.prune``, ``threads.join_stream``, ``runs.delete``, ``/runs/batch`` and the
history's filters. Each refusal is a 4xx naming the fix, with nothing stored."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from longtask import LongTask, Runner, Stage, StepContext, approval, function_step
from longtask.serve import create_app
from longtask.serve._registry import load_registry

TOKENS = {"tok-alice": "alice", "tok-bob": "bob", "tok-root": "root", "tok-vera": "vera"}
ROLES = {"root": "admin", "vera": "viewer"}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
ROOT = {"Authorization": "Bearer tok-root"}
VERA = {"Authorization": "Bearer tok-vera"}

#: how often each effect was performed, by name and argument
PERFORMED: dict[str, int] = {}


def _perform(what: str) -> str:
    PERFORMED[what] = PERFORMED.get(what, 0) + 1
    return f"did {what}"


@function_step
def before(ctx: StepContext) -> str:
    return str(ctx.effect("before", _perform, f"before-{ctx.inputs['n']}"))


@function_step
def after(ctx: StepContext) -> str:
    return str(ctx.effect("after", _perform, f"after-{ctx.thread_id}"))


TASK = LongTask(
    "misc_task",
    stages=[
        Stage("before", [before]),
        Stage("ok", [approval("ok", plan=lambda ctx: {"go": ctx.inputs["n"]})]),
        Stage("after", [after]),
    ],
)


#: what ``held`` waits for (the test sets it once the thread's stream has been joined)
RELEASE = threading.Event()
#: set when ``held`` has started
HELD_STARTED = threading.Event()


@function_step
def held(ctx: StepContext) -> str:
    HELD_STARTED.set()
    RELEASE.wait(60)
    return "released"


HELD = LongTask("misc_held", stages=[Stage("held", [held])])


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    app = create_app(
        runner,
        TOKENS,
        roles=ROLES,
        registry=load_registry(["test_lg_misc:TASK", "test_lg_misc:HELD"]),
        schedule_poll=None,
        poll=0.02,
    )
    with TestClient(app) as c:
        yield c


def tables(runner: Runner) -> dict[str, list[str]]:
    from test_access import tables as every_row

    return every_row(runner)


def wait_for(what: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def run(client: TestClient, thread: str, body: dict[str, Any], who: dict[str, str]) -> str:
    r = client.post(
        f"/threads/{thread}/runs", json={"assistant_id": "misc_task", **body}, headers=who
    )
    assert r.status_code == 200, r.text
    run_id = str(r.json()["run_id"])
    wait_for(
        lambda: (
            client.get(f"/threads/{thread}/runs/{run_id}", headers=who).json()["status"]
            not in ("pending", "running")
        )
    )
    return run_id


def paused(client: TestClient, who: dict[str, str] = ALICE, n: int = 1) -> str:
    thread = str(
        client.post("/threads", json={"metadata": {"k": "v"}}, headers=who).json()["thread_id"]
    )
    run(client, thread, {"input": {"n": n}}, who)
    assert client.get(f"/threads/{thread}", headers=who).json()["status"] == "interrupted"
    return thread


APPROVE = {"command": {"resume": {"approved": True}}}


# -- threads.copy -----------------------------------------------------------------------------


def test_a_copy_of_a_paused_thread_is_a_thread_of_its_own_that_continues(
    runner: Runner, client: TestClient
) -> None:
    PERFORMED.clear()
    source = paused(client, n=7)
    r = client.post(f"/threads/{source}/copy", headers=ROOT)
    assert r.status_code == 200, r.text
    copy = r.json()
    new = copy["thread_id"]
    assert new != source and copy["metadata"]["k"] == "v"
    # The copy is the caller's, with the source's state, history and pause.
    assert runner.db.store.get_thread(new).owner == "root"  # type: ignore[union-attr]
    assert client.get(f"/threads/{new}", headers=ALICE).status_code == 404
    assert runner.status(new).status == "waiting_user"
    assert [p.step for p in runner.pending(new)] == ["ok"]
    state, copied = (client.get(f"/threads/{t}/state", headers=ROOT).json() for t in (source, new))
    assert copied["values"] == state["values"] and copied["next"] == state["next"]
    history = [
        client.post(f"/threads/{t}/history", json={"limit": 50}, headers=ROOT).json()
        for t in (source, new)
    ]
    assert [h["checkpoint"]["checkpoint_id"] for h in history[0]] == [
        h["checkpoint"]["checkpoint_id"] for h in history[1]
    ]
    assert [e.kind for e in runner.events(new)][-1] == "manual.copy"
    assert runner.events(new)[-1].data == {"by": "root", "from": source}
    # Answering the copy's pause continues the copy alone, performing its own effect once;
    # the effect before the pause is in the copy's ledger, so it is not performed again.
    run(client, new, APPROVE, ROOT)
    assert runner.status(new).status == "completed"
    assert runner.status(source).status == "waiting_user"
    assert {"before-7": 1, f"after-{new}": 1} == PERFORMED
    first = runner.history(new, limit=100)[-1].checkpoint_id
    runner.fork(new, first, inputs={"n": 7}, by="root", task=TASK)
    runner.resume(new, task=TASK)
    assert PERFORMED["before-7"] == 1  # the same effect, found in the copy's ledger
    run(client, source, APPROVE, ALICE)
    assert {"before-7": 1, f"after-{new}": 1, f"after-{source}": 1} == PERFORMED


def test_a_copy_is_refused_with_nothing_written(runner: Runner, client: TestClient) -> None:
    source = paused(client)
    made = client.post("/threads", json={"metadata": {"only": "api"}}, headers=ALICE).json()
    before = tables(runner)
    assert client.post(f"/threads/{source}/copy", json=[], headers=ALICE).status_code == 400
    assert client.post(f"/threads/{source}/copy", headers=BOB).status_code == 404
    assert client.post(f"/threads/{source}/copy", headers=VERA).status_code == 403
    # a thread being advanced is refused (the record says running: a run is writing it)
    runner.db.store._run(
        "UPDATE longtask_threads SET status = 'running' WHERE thread_id = ?", (source,)
    )
    busy = client.post(f"/threads/{source}/copy", headers=ALICE)
    assert busy.status_code == 409 and "being advanced" in busy.json()["detail"], busy.text
    runner.db.store._run(
        "UPDATE longtask_threads SET status = 'waiting_user' WHERE thread_id = ?", (source,)
    )
    missing = client.post("/threads/no-such-thread/copy", headers=ALICE)
    assert missing.status_code == 409 and "no thread" in missing.json()["detail"]
    assert tables(runner) == before
    # A thread the API created that has not run is copied as what it is: its metadata.
    r = client.post(f"/threads/{made['thread_id']}/copy", headers=ALICE)
    assert r.status_code == 200 and r.json()["metadata"] == {"only": "api"}
    assert r.json()["status"] == "idle"


# -- threads.prune ----------------------------------------------------------------------------


def test_prune_deletes_or_trims_ended_threads_the_caller_may_act_on(
    runner: Runner, client: TestClient
) -> None:
    done = paused(client)
    run(client, done, APPROVE, ALICE)
    trimmed = paused(client, n=2)
    run(client, trimmed, APPROVE, ALICE)
    waiting = paused(client, n=3)
    bobs = paused(client, BOB, n=4)
    fresh = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    before = tables(runner)
    refusals = [
        ({"thread_ids": [done, waiting]}, ALICE, 409, "longtask cancel"),
        ({"thread_ids": [done], "strategy": "all"}, ALICE, 422, "keep_latest"),
        ({"thread_ids": done}, ALICE, 422, "list"),
        ({"thread_ids": [done]}, VERA, 403, "viewer"),
    ]
    for body, who, status, named in refusals:
        r = client.post("/threads/prune", json=body, headers=who)
        assert r.status_code == status and named in r.json()["detail"], r.text
    assert client.post("/threads/prune", json=[], headers=ALICE).status_code == 400
    # bob's thread, which alice may not see, is skipped as an id no thread has (issue 50)
    r = client.post("/threads/prune", json={"thread_ids": [bobs, "no-such"]}, headers=ALICE)
    assert r.json() == {"pruned_count": 0}
    assert tables(runner) == before
    # keep_latest: the thread stays, with its latest checkpoint only
    r = client.post(
        "/threads/prune", json={"thread_ids": [trimmed], "strategy": "keep_latest"}, headers=ALICE
    )
    assert r.json() == {"pruned_count": 1}
    kept = client.post(f"/threads/{trimmed}/history", json={"limit": 50}, headers=ALICE).json()
    assert len(kept) == 1 and kept[0]["values"]["after"].startswith("did after")
    # delete: every row of the thread goes; a missing id is skipped
    r = client.post("/threads/prune", json={"thread_ids": [done, fresh, "no-such"]}, headers=ALICE)
    assert r.json() == {"pruned_count": 2}
    for gone in (done, fresh):
        assert client.get(f"/threads/{gone}", headers=ALICE).status_code == 404
    assert runner.status(waiting).status == "waiting_user"


# -- runs.delete, /runs/batch -----------------------------------------------------------------


def test_a_finished_run_s_record_is_deleted_and_an_open_one_kept(
    runner: Runner, client: TestClient
) -> None:
    thread = paused(client)
    (first,) = client.get(f"/threads/{thread}/runs", headers=ALICE).json()
    url = f"/threads/{thread}/runs/{first['run_id']}"
    assert client.delete(url, headers=BOB).status_code == 404
    assert client.delete(f"/threads/{thread}/runs/no-such", headers=ALICE).status_code == 404
    # an open run (recorded, not yet taken: the store says pending) is kept
    runner.db.store._run(
        "UPDATE longtask_api_runs SET status = 'running' WHERE run_id = ?", (first["run_id"],)
    )
    before = tables(runner)
    busy = client.delete(url, headers=ALICE)
    assert busy.status_code == 409 and "cancel" in busy.json()["detail"]
    assert tables(runner) == before
    # ended, but its webhook is still owed: kept until it is delivered
    runner.db.store._run(
        "UPDATE longtask_api_runs SET status = 'success', webhook = 'http://127.0.0.1:9/h' "
        "WHERE run_id = ?",
        (first["run_id"],),
    )
    owed = client.delete(url, headers=ALICE)
    assert owed.status_code == 409 and "webhook" in owed.json()["detail"]
    runner.db.store._run(
        "UPDATE longtask_api_runs SET webhook = NULL WHERE run_id = ?", (first["run_id"],)
    )
    assert client.delete(url, headers=ALICE).status_code == 204
    assert client.get(url, headers=ALICE).status_code == 404
    # the thread and its history are kept
    assert runner.status(thread).status == "waiting_user"


def test_a_batch_records_every_run_or_none(runner: Runner, client: TestClient) -> None:
    before = tables(runner)
    bad = [
        [{"assistant_id": "misc_task", "input": {"n": 1}}, {"input": {"n": 2}}],
        [{"assistant_id": "misc_task", "input": {"n": 1}}, {"assistant_id": "nope"}],
        [
            {"assistant_id": "misc_task", "input": {"n": 1}},
            {"assistant_id": "misc_task", "input": 3},
        ],
        [],
        {"assistant_id": "misc_task"},
    ]
    for body in bad:
        r = client.post("/runs/batch", json=body, headers=ALICE)
        assert 400 <= r.status_code < 500, r.text
        if isinstance(body, list) and body:
            assert "run 1 of the batch" in r.json()["detail"], r.text
    assert client.post("/runs/batch", json=bad[0][:1], headers=VERA).status_code == 403
    assert tables(runner) == before
    body = [{"assistant_id": "misc_task", "input": {"n": n}} for n in (1, 2)]
    r = client.post("/runs/batch", json=body, headers=ALICE)
    assert r.status_code == 200, r.text
    runs = r.json()
    assert len(runs) == 2 and len({x["thread_id"] for x in runs}) == 2
    for x in runs:
        assert x["status"] == "pending" and x["kwargs"]["temporary"] is True
        wait_for(lambda x=x: runner.db.store.get_thread(x["thread_id"]) is not None)
        wait_for(lambda x=x: runner.status(x["thread_id"]).status == "waiting_user")
        assert runner.db.store.get_thread(x["thread_id"]).owner == "alice"  # type: ignore[union-attr]


# -- threads.join_stream ----------------------------------------------------------------------


def events_of(text: str) -> list[str]:
    return [line[len("event: ") :] for line in text.splitlines() if line.startswith("event: ")]


def _until_run_done(s: Any, run_id: str) -> str:
    """A thread stream's text up to the ``run_done`` of ``run_id`` (the stream stays open
    for the thread's next runs: closing it ends the request)."""
    lines = []
    for line in s.iter_lines():
        lines.append(line)
        if f'"status":"run_done","run_id":"{run_id}"' in line:
            break
    return "\n".join(lines)


def test_a_thread_s_stream_joins_its_open_run_and_replays_resumable_ones(
    runner: Runner, client: TestClient
) -> None:
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    r = client.post(
        f"/threads/{thread}/runs",
        json={"assistant_id": "misc_task", "input": {"n": 1}, "stream_resumable": True},
        headers=ALICE,
    )
    run_id = r.json()["run_id"]
    wait_for(lambda: runner.db.store.get_thread(thread) is not None)
    wait_for(lambda: runner.status(thread).status == "waiting_user")
    # with Last-Event-ID, the thread's resumable runs are replayed, each ending in run_done
    headers = {**ALICE, "Last-Event-ID": "-"}
    with client.stream("GET", f"/threads/{thread}/stream", headers=headers) as s:
        assert s.status_code == 200
        text = _until_run_done(s, run_id)
    parts = events_of(text)
    assert parts[0] == "metadata" and "values" in parts and parts[-1] == "metadata"
    url = f"/threads/{thread}/stream?stream_modes=lifecycle"
    with client.stream("GET", url, headers=headers) as s:
        assert events_of(_until_run_done(s, run_id)) == ["metadata", "metadata"]
    # bad input: 422 naming it
    bad = client.get(f"/threads/{thread}/stream?stream_modes=values", headers=ALICE)
    assert bad.status_code == 422 and "run_modes" in bad.json()["detail"]
    bad = client.get(f"/threads/{thread}/stream", headers={**ALICE, "Last-Event-ID": "x y"})
    assert bad.status_code == 422 and "last-event-id" in bad.json()["detail"]
    assert client.get("/threads/no-such/stream", headers=ALICE).status_code == 404


def test_joining_an_idle_thread_s_stream_then_starting_a_run_streams_that_run(
    runner: Runner, client: TestClient
) -> None:
    # As on LangGraph's server: a client joins the thread's stream, then starts a run on
    # it, and the stream carries that run (an ended run of before the join is not sent).
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    first = client.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "misc_task", "input": {"n": 1}},
        headers=ALICE,
    )
    assert first.status_code == 200
    earlier = {r["run_id"] for r in client.get(f"/threads/{thread}/runs", headers=ALICE).json()}
    with client.stream("GET", f"/threads/{thread}/stream", headers=ALICE) as s:
        assert s.status_code == 200
        run = client.post(
            f"/threads/{thread}/runs",
            json={"assistant_id": "misc_task", "command": {"resume": {"approved": True}}},
            headers=ALICE,
        )
        assert run.status_code == 200, run.text
        run_id = run.json()["run_id"]
        text = _until_run_done(s, run_id)
    parts = events_of(text)
    first_data = next(line for line in text.splitlines() if line.startswith("data:"))
    assert parts[0] == "metadata" and f'"run_id":"{run_id}"' in first_data
    assert "values" in parts
    assert not any(f'"run_id":"{e}"' in text for e in earlier)


def test_a_thread_s_stream_follows_the_run_in_progress_to_its_end(
    runner: Runner, client: TestClient
) -> None:
    RELEASE.clear()
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    body = {"assistant_id": "misc_held", "input": {}, "stream_mode": ["values", "updates"]}
    run_id = client.post(f"/threads/{thread}/runs", json=body, headers=ALICE).json()["run_id"]
    lines = []
    with client.stream("GET", f"/threads/{thread}/stream", headers=ALICE) as s:
        for line in s.iter_lines():
            if line:
                lines.append(line)
            RELEASE.set()  # joined (the step waits until then): the run may end now
            if f'"status":"run_done","run_id":"{run_id}"' in line:
                break  # the stream stays open for the thread's next runs
    parts = events_of("\n".join(lines))
    assert parts[0] == "metadata" and {"values", "updates"} <= set(parts), parts
    assert parts[-1] == "metadata" and f'"run_id":"{run_id}"' in lines[-1]
    assert '"status":"run_done"' in "\n".join(lines)
    assert runner.status(thread).status == "completed"


# -- on_disconnect / cancel_on_disconnect ------------------------------------------------------


def _held_run(client: TestClient, headers: dict[str, str], **body: Any) -> tuple[str, Any]:
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    stream = client.stream(
        "POST",
        f"/threads/{thread}/runs/stream",
        json={"assistant_id": "misc_held", "input": {}, **body},
        headers=headers,
    )
    return thread, stream


def _until_held(runner: Runner, thread: str) -> None:
    """Until the thread's held step runs (its run is under way, not pending)."""
    assert HELD_STARTED.wait(60), "the held step did not start"


@pytest.mark.parametrize("mode", ["cancel", "continue", None])
def test_a_client_that_leaves_a_run_s_stream_cancels_it_only_when_asked(
    runner: Runner, client: TestClient, mode: str | None
) -> None:
    RELEASE.clear()
    HELD_STARTED.clear()
    thread, stream = _held_run(client, ALICE, **({"on_disconnect": mode} if mode else {}))
    with stream as s:
        assert s.status_code == 200
        lines = s.iter_lines()  # kept: a dropped iterator closes the stream
        first = next(line for line in lines if line.startswith("data: "))
        run_id = first.split('"run_id":"')[1].split('"')[0]
        _until_held(runner, thread)
    # the client has gone, the step still runs: it ends once released
    if mode == "cancel":
        wait_for(lambda: bool(runner.events(thread, kinds=["manual.cancel"])))
    RELEASE.set()
    wanted = "cancelled" if mode == "cancel" else "completed"
    wait_for(lambda: runner.status(thread).status in ("cancelled", "completed"))
    assert runner.status(thread).status == wanted
    wait_for(
        lambda: (
            client.get(f"/threads/{thread}/runs/{run_id}", headers=ALICE).json()["status"]
            not in ("pending", "running")
        )
    )
    if mode == "cancel":
        (ended,) = runner.events(thread, kinds=["longtask.cancelled"])
        assert ended.data["by"] == "alice"


def test_cancel_on_disconnect_is_for_those_who_may_act_and_bad_values_are_refused(
    runner: Runner, client: TestClient
) -> None:
    RELEASE.clear()
    HELD_STARTED.clear()
    thread = client.post("/threads", json={}, headers=ALICE).json()["thread_id"]
    bad = client.post(
        f"/threads/{thread}/runs/stream",
        json={"assistant_id": "misc_held", "input": {}, "on_disconnect": "maybe"},
        headers=ALICE,
    )
    assert bad.status_code == 422 and "on_disconnect" in bad.json()["detail"]
    assert client.get(f"/threads/{thread}/runs", headers=ALICE).json() == []  # none recorded
    run_id = client.post(
        f"/threads/{thread}/runs", json={"assistant_id": "misc_held", "input": {}}, headers=ALICE
    ).json()["run_id"]
    url = f"/threads/{thread}/runs/{run_id}/stream?cancel_on_disconnect=true"
    # vera may read every thread but act on none: her leaving cannot cancel alice's run
    vera = {"Authorization": "Bearer tok-vera"}
    refused = client.get(url, headers=vera)
    assert refused.status_code == 403 and "cancel_on_disconnect" in refused.json()["detail"]
    assert client.get(url.replace("true", "perhaps"), headers=ALICE).status_code == 422
    # alice joins asking for it, then leaves: her run is cancelled
    with client.stream("GET", url, headers=ALICE) as s:
        assert s.status_code == 200
        lines = s.iter_lines()  # kept: a dropped iterator closes the stream
        next(line for line in lines if line.startswith("data: "))
        _until_held(runner, thread)
    wait_for(lambda: bool(runner.events(thread, kinds=["manual.cancel"])))
    RELEASE.set()
    wait_for(lambda: runner.status(thread).status in ("cancelled", "completed"))
    assert runner.status(thread).status == "cancelled"


# -- history filters --------------------------------------------------------------------------


def test_history_filters_by_metadata_before_checkpoint_and_limit(
    runner: Runner, client: TestClient
) -> None:
    thread = paused(client)
    url = f"/threads/{thread}/history"
    every = client.post(url, json={"limit": 100}, headers=ALICE).json()
    assert len(every) > 2
    assert len(client.post(url, json={}, headers=ALICE).json()) == 1  # LangGraph's default
    assert len(client.get(url, headers=ALICE).json()) == 1
    loops = client.post(url, json={"limit": 100, "metadata": {"source": "loop"}}, headers=ALICE)
    assert loops.json() and all(h["metadata"]["source"] == "loop" for h in loops.json())
    assert len(loops.json()) < len(every)
    middle = every[1]["checkpoint"]["checkpoint_id"]
    older = client.post(url, json={"limit": 100, "before": middle}, headers=ALICE).json()
    assert [h["checkpoint"]["checkpoint_id"] for h in older] == [
        h["checkpoint"]["checkpoint_id"] for h in every[2:]
    ]
    at = client.post(
        url, json={"limit": 100, "checkpoint": {"checkpoint_id": middle}}, headers=ALICE
    ).json()
    assert [h["checkpoint"]["checkpoint_id"] for h in at] == [middle]
    for body, named in (
        ({"metadata": ["source"]}, "metadata"),
        ({"checkpoint": "x"}, "checkpoint"),
        ({"checkpoint": {"checkpoint_ns": "agent:1"}}, "checkpoint_ns"),
        ({"checkpoint": {"checkpoint_id": 5}}, "checkpoint.checkpoint_id"),
    ):
        r = client.post(url, json=body, headers=ALICE)
        assert r.status_code == 422 and named in r.json()["detail"], r.text
