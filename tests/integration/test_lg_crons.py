"""The Server API's crons on longtask's schedules, on every backend: a cron of an assistant
fires at its due time into one new thread (owned by who made the cron), a cron of a thread
into a run of that thread; a second fire of the same tick records nothing; search, count,
get, patch and delete, each shown only to who may see the cron; bad input is a 422 that
names the fix and stores nothing.

No test waits for a cron minute: crons are made with serve's clock fixed in the past, so
their first tick is due at once for the loop that fires them (on the real clock), and the
next one is a day away.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from longtask import Runner
from longtask.serve import create_app
from longtask.serve._registry import load_registry

LG_TASKS = Path(__file__).parents[1] / "acceptance" / "lg_task.py"
TOKENS = {"tok-alice": "alice", "tok-bob": "bob", "tok-root": "root", "tok-vera": "vera"}
ROLES = {"root": "admin", "vera": "viewer"}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
ADMIN = {"Authorization": "Bearer tok-root"}
VIEWER = {"Authorization": "Bearer tok-vera"}
#: serve's clock while crons are made: 2026-12-01 00:00 UTC, before the real now
PAST = datetime(2026, 12, 1, tzinfo=UTC)


def _until(what: str, ok: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    with Runner(db_url, clock=lambda: PAST) as r:
        yield r


def _client(runner: Runner, poll: float | None) -> TestClient:
    registry = load_registry([f"{LG_TASKS}:RELEASE"])
    app = create_app(runner, TOKENS, roles=ROLES, registry=registry, schedule_poll=poll)
    return TestClient(app, headers=ALICE)


def _ended(runner: Runner, thread_id: str) -> bool:
    """Whether the thread's runs have all ended (a run ends just after its thread pauses)."""
    runs = runner.db.store.api_runs(thread_id)
    return bool(runs) and all(r.status not in ("pending", "running") for r in runs)


def _cron_threads(runner: Runner, cron_id: str) -> list[str]:
    return [t for t, meta, _ in runner.db.store.api_threads() if meta.get("cron_id") == cron_id]


def test_a_cron_of_an_assistant_fires_once_into_a_new_thread_of_its_owner(
    runner: Runner,
) -> None:
    with _client(runner, 0.05) as client:
        made = client.post(
            "/runs/crons",
            json={
                "assistant_id": "lg_release",
                "schedule": "0 3 * * *",
                "metadata": {"team": "ops"},
                "on_run_completed": "keep",
            },
        )
        assert made.status_code == 200, made.text
        cron = made.json()
        ended = client.post(
            "/runs/crons",
            json={
                "assistant_id": "lg_release",
                "schedule": "0 3 * * *",
                "end_time": "2026-11-30T00:00:00Z",
            },
        ).json()
        assert cron["next_run_date"] == "2026-12-01T03:00:00+00:00"
        assert cron["user_id"] == "alice" and cron["enabled"] is True
        assert cron["thread_id"] is None and cron["metadata"] == {"team": "ops"}
        assert ended["end_time"] == "2026-11-30T00:00:00+00:00"
        _until(
            "the loop to fire the cron and the run to pause at the approval",
            lambda: (
                len(threads := _cron_threads(runner, cron["cron_id"])) == 1
                and (rec := runner.db.store.get_thread(threads[0])) is not None
                and rec.status == "waiting_user"
                and _ended(runner, rec.thread_id)
            ),
        )
        (thread_id,) = _cron_threads(runner, cron["cron_id"])
        rec = runner.db.store.get_thread(thread_id)
        assert rec is not None and rec.owner == "alice" and rec.task_name == "lg_release"
        runs = client.get(f"/threads/{thread_id}/runs").json()
        assert [(r["status"], r["metadata"]) for r in runs] == [("success", {"team": "ops"})]
        # The tick is fired: firing again (another process, the same time) records nothing.
        again = runner.fire_due(now=datetime.now(UTC))
        assert not [f for f in again if f.outcome == "fired"]
        after = client.get(f"/runs/crons/{cron['cron_id']}").json()
        assert after["next_run_date"] > datetime.now(UTC).isoformat()
        assert _cron_threads(runner, ended["cron_id"]) == []
        assert len(client.get(f"/threads/{thread_id}/runs").json()) == 1


def test_a_cron_of_a_thread_records_a_run_of_that_thread(runner: Runner) -> None:
    with _client(runner, 0.05) as client:
        thread_id = client.post("/threads", json={}).json()["thread_id"]
        made = client.post(
            f"/threads/{thread_id}/runs/crons",
            json={"assistant_id": "lg_release", "schedule": "30 2 * * *", "input": {}},
        )
        assert made.status_code == 200, made.text
        assert made.json()["thread_id"] == thread_id
        _until(
            "the cron's run to start the thread",
            lambda: (
                (rec := runner.db.store.get_thread(thread_id)) is not None
                and rec.status == "waiting_user"
                and _ended(runner, rec.thread_id)
            ),
        )
        runs = client.get(f"/threads/{thread_id}/runs").json()
        assert [r["status"] for r in runs] == ["success"]
        # bob may not put a cron on alice's thread; a thread that is not: 404
        refused = client.post(
            f"/threads/{thread_id}/runs/crons",
            json={"assistant_id": "lg_release", "schedule": "* * * * *"},
            headers=BOB,
        )
        assert refused.status_code == 404
        missing = client.post(
            "/threads/nope/runs/crons", json={"assistant_id": "lg_release", "schedule": "@daily"}
        )
        assert missing.status_code == 404


def test_search_count_get_patch_and_delete_show_a_cron_to_who_may_see_it(
    runner: Runner,
) -> None:
    with _client(runner, None) as client:

        def make(headers: dict[str, str], **extra: Any) -> dict[str, Any]:
            body = {"assistant_id": "lg_release", "schedule": "0 9 * * 1", **extra}
            answer = client.post("/runs/crons", json=body, headers=headers)
            assert answer.status_code == 200, answer.text
            return dict(answer.json())

        a1 = make(ALICE, metadata={"n": 1})
        a2 = make(ALICE, metadata={"n": 2}, timezone="Europe/Paris")
        b1 = make(BOB)
        assert a2["timezone"] == "Europe/Paris" and a1["timezone"] is None
        assert a2["next_run_date"] == "2026-12-07T08:00:00+00:00"  # 09:00 in Paris

        def search(headers: dict[str, str], **body: Any) -> list[dict[str, Any]]:
            answer = client.post("/runs/crons/search", json=body, headers=headers)
            assert answer.status_code == 200, answer.text
            return list(answer.json())

        assert {c["cron_id"] for c in search(ALICE)} == {a1["cron_id"], a2["cron_id"]}
        assert [c["cron_id"] for c in search(BOB)] == [b1["cron_id"]]
        assert len(search(VIEWER)) == 3 and len(search(ADMIN)) == 3
        assert [c["cron_id"] for c in search(ALICE, metadata={"n": 2})] == [a2["cron_id"]]
        asc = search(ALICE, sort_by="created_at", sort_order="asc", limit=1, offset=1)
        assert [c["cron_id"] for c in asc] == [a2["cron_id"]]
        assert search(ALICE, select=["cron_id", "enabled"], limit=1)[0].keys() == {
            "cron_id",
            "enabled",
        }
        assert client.post("/runs/crons/count", json={}).json() == 2
        assert client.post("/runs/crons/count", json={}, headers=VIEWER).json() == 3
        assert client.post("/runs/crons/count", json={"assistant_id": "nope"}).json() == 0

        one = f"/runs/crons/{a1['cron_id']}"
        assert client.get(one, headers=BOB).status_code == 404
        assert client.get(one, headers=VIEWER).json()["cron_id"] == a1["cron_id"]
        assert client.patch(one, json={"enabled": False}, headers=BOB).status_code == 404
        assert client.patch(one, json={"enabled": False}, headers=VIEWER).status_code == 403
        patched = client.patch(one, json={"enabled": False, "schedule": "0 10 * * *"}).json()
        assert patched["enabled"] is False and patched["schedule"] == "0 10 * * *"
        assert patched["next_run_date"] == "2026-12-01T10:00:00+00:00"
        assert patched["metadata"] == {"n": 1}
        assert [c["cron_id"] for c in search(ALICE, enabled=False)] == [a1["cron_id"]]
        by_admin = client.patch(one, json={"enabled": True}, headers=ADMIN).json()
        assert by_admin["enabled"] is True and by_admin["user_id"] == "alice"
        assert client.patch(one, json={}).status_code == 400

        assert client.delete(one, headers=BOB).status_code == 404
        assert client.delete(one, headers=VIEWER).status_code == 403
        assert client.delete(one).status_code == 204
        assert client.get(one).status_code == 404
        assert client.post("/runs/crons/count", json={}).json() == 1


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"schedule": "0 3 * *"}, "has 4 fields; give five"),
        ({"schedule": "61 3 * * *"}, "is not valid"),
        ({"schedule": "@sometimes"}, "is not a known alias"),
        ({"schedule": "0 3 * * *", "timezone": "Mars/Olympus"}, "is unknown; give an IANA"),
        ({"schedule": "0 3 * * *", "end_time": "tomorrow"}, "ISO 8601"),
        ({"schedule": "0 3 * * *", "input": "hello"}, "input is an object"),
        ({"schedule": "0 3 * * *", "multitask_strategy": "rollback"}, "enqueue"),
        ({}, "schedule is required"),
    ],
)
def test_bad_crons_are_refused_naming_the_fix_and_store_nothing(
    runner: Runner, body: dict[str, Any], named: str
) -> None:
    with _client(runner, None) as client:
        answer = client.post("/runs/crons", json={"assistant_id": "lg_release", **body})
        assert answer.status_code == 422, answer.text
        assert named in answer.json()["detail"]
        assert client.post("/runs/crons/count", json={}).json() == 0
        assert runner.db.store.schedules() == []
        good = client.post(
            "/runs/crons", json={"assistant_id": "lg_release", "schedule": "0 3 * * *"}
        ).json()
        bad = client.patch(f"/runs/crons/{good['cron_id']}", json=body or {"schedule": 5})
        assert bad.status_code == 422, bad.text
        assert client.get(f"/runs/crons/{good['cron_id']}").json() == good


def test_a_tick_fired_elsewhere_is_recorded_once_and_carried_out_by_serve(
    runner: Runner, db_url: str
) -> None:
    """Two processes fire the same tick at once (workers, ``longtask tick``): one run is
    recorded; serve, which did not fire it, takes it up and carries it out."""
    import threading

    with _client(runner, 0.05) as client:
        cron = client.post(
            "/runs/crons", json={"assistant_id": "lg_release", "schedule": "0 3 1 1 *"}
        ).json()
        assert cron["next_run_date"] == "2027-01-01T03:00:00+00:00"  # not due for serve
        due = datetime(2027, 1, 1, 3, 0, 30, tzinfo=UTC)
        fired: list[Any] = []

        def fire() -> None:
            with Runner(db_url) as other:
                fired.extend(other.fire_due(now=due))

        workers = [threading.Thread(target=fire) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        outcomes = sorted(f.outcome for f in fired if f.schedule == cron["cron_id"])
        assert outcomes in (["fired"], ["already fired", "fired"]), outcomes
        (thread_id,) = _cron_threads(runner, cron["cron_id"])
        _until(
            "serve to carry out the run another process recorded",
            lambda: (
                (rec := runner.db.store.get_thread(thread_id)) is not None
                and rec.status == "waiting_user"
                and _ended(runner, rec.thread_id)
            ),
        )
        runs = client.get(f"/threads/{thread_id}/runs").json()
        assert [r["status"] for r in runs] == ["success"]
        assert client.get(f"/runs/crons/{cron['cron_id']}").json()["next_run_date"] == (
            "2028-01-01T03:00:00+00:00"
        )
