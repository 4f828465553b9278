"""The side-effect ledger across real process deaths (both backends).

A step charges an outside service through ``ctx.effect`` (see ``effect_task.py``). The worst
case is a process killed with ``os._exit`` after the service recorded the call but before the
ledger recorded its success: the ledger row stays ``started`` and nobody knows in the ledger
whether the charge happened. ``longtask resume`` must then never charge blindly again:

- with a reconciler, it asks the service and completes with what the service knows;
- without one, it pauses for a person (exit 3, ``waiting_user``, the exact
  ``longtask effects resolve`` command), however often it is resumed, and the person's
  ``--succeeded --result`` / ``--retry`` decides what happens.

A crash before the step reaches ``ctx.effect`` leaves no ledger row, and the resume charges
exactly once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import effect_task
import pytest
from conftest import run_cli

from longtask import Runner

HERE = Path(__file__).resolve().parent
AMOUNT = 5


def _ref(task: str) -> str:
    return f"{HERE / 'effect_task.py'}:{task}"


def _env(tmp_path: Path, crash_flag: str) -> dict[str, str]:
    return {
        effect_task.SERVICE_ENV: str(tmp_path / "service.db"),
        effect_task.MARKER_ENV: str(tmp_path / "crashed"),
        crash_flag: "1",
    }


def _wait_inactive(db_url: str, thread_id: str) -> None:
    """The dead process's lock goes away with it; on PostgreSQL the server notices the closed
    connection a moment later, so poll (bounded) rather than race it."""
    deadline = time.monotonic() + 10
    with Runner(db_url) as runner:
        while runner.status(thread_id).active and time.monotonic() < deadline:
            time.sleep(0.05)


def _crashed_run(db_url: str, tmp_path: Path, task: str, thread: str, env: dict[str, str]) -> None:
    """``longtask run`` that dies where ``env`` says; the thread is left running, unowned."""
    first = run_cli(
        "run",
        _ref(task),
        "--thread",
        thread,
        "--input",
        json.dumps({"amount": AMOUNT}),
        db=db_url,
        env=env,
    )
    assert first.returncode == 1, first.stdout + first.stderr
    assert (tmp_path / "crashed").exists(), f"the process did not crash:\n{first.stderr}"
    _wait_inactive(db_url, thread)
    with Runner(db_url) as runner:
        st = runner.status(thread)
        assert (st.status, st.active) == ("running", False)
        assert {s.name: s.state for s in st.steps}["receipt"] == "pending"


def _ledger(db_url: str, thread: str, *, cli: bool = False) -> list[dict[str, Any]]:
    """The thread's ledger as `longtask effects THREAD --json` prints it (``cli``: from a
    subprocess; otherwise in process, which is faster and gives the same JSON)."""
    if not cli:
        with Runner(db_url) as runner:
            return [r.to_json() for r in runner.effects(thread)]
    shown = run_cli("effects", thread, "--json", db=db_url)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    rows: list[dict[str, Any]] = json.loads(shown.stdout)
    return rows


def _status(db_url: str, thread: str, *, cli: bool = False) -> dict[str, Any]:
    """`longtask status THREAD --json` (``cli``: from a subprocess; otherwise in process)."""
    if not cli:
        with Runner(db_url) as runner:
            return runner.status(thread).model_dump(mode="json")
    shown = run_cli("status", thread, "--json", db=db_url)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    status: dict[str, Any] = json.loads(shown.stdout)
    return status


def _cut_off_call(
    db_url: str, tmp_path: Path, task: str, thread: str
) -> tuple[dict[str, str], str]:
    """Run ``task`` into the worst-case crash; returns the env and the effect's key."""
    env = _env(tmp_path, effect_task.CRASH_IN_EFFECT)
    _crashed_run(db_url, tmp_path, task, thread, env)
    [row] = _ledger(db_url, thread)
    assert (row["step"], row["name"], row["status"], row["calls"]) == (
        "pay",
        "charge",
        "started",
        1,
    )
    assert row["result"] is None and row["thread_id"] == thread
    key: str = row["key"]
    assert key.startswith("eff-")
    # the service did get the call, with the ledger's key as its idempotency key
    assert effect_task.service_calls(tmp_path / "service.db") == [(key, AMOUNT)]
    return env, key


def _waiting_for_person(
    db_url: str, thread: str, key: str, env: dict[str, str], *, cli: bool = True
) -> None:
    """``resume`` pauses on the unknown outcome: exit 3, the exact command, waiting_user."""
    resumed = run_cli("resume", thread, db=db_url, env=env)
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr
    assert f"thread {thread} is paused (waiting_user)" in resumed.stdout
    assert f"longtask effects resolve {thread} {key} --succeeded --result JSON" in resumed.stdout
    status = _status(db_url, thread, cli=cli)
    assert status["status"] == "waiting_user"
    [waiting] = status["waiting"]
    assert waiting["kind"] == "effect" and waiting["step"] == "pay"
    assert waiting["reason"] == "effect outcome unknown"
    assert waiting["key"] == key
    assert {s["name"]: s["state"] for s in status["steps"]} == {
        "pay": "waiting",
        "receipt": "pending",
    }


def test_cut_off_call_is_reconciled_on_resume(db_url: str, tmp_path: Path) -> None:
    thread = "eff-reconciled"
    service = tmp_path / "service.db"
    env, key = _cut_off_call(db_url, tmp_path, "reconciled", thread)

    resumed = run_cli("resume", thread, db=db_url, env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"thread {thread} completed" in resumed.stdout

    # the reconciler found the call: the service was not called again
    assert effect_task.service_calls(service) == [(key, AMOUNT)]
    [row] = _ledger(db_url, thread, cli=True)
    assert (row["key"], row["status"], row["calls"], row["error"]) == (key, "succeeded", 1, None)
    found = {"charged": AMOUNT, "key": key, "reconciled": True}
    assert row["result"] == found
    # the step ran in both processes; only the first one reached the service
    runs = effect_task.step_runs(service)
    assert [s for s, _ in runs] == ["pay", "pay"] and runs[0][1] != runs[1][1]
    with Runner(db_url) as runner:
        assert runner.status(thread).status == "completed"
        assert runner.result(thread, "pay") == found
        assert runner.result(thread, "receipt") == {"charged": AMOUNT, "pay": found}
        reconciled = [e for e in runner.events(thread) if e.kind == "effect.succeeded"]
        assert [e.data for e in reconciled] == [{"key": key, "name": "charge", "reconciled": True}]
        assert not [e for e in runner.events(thread) if e.kind == "effect.unknown"]


def test_cut_off_call_without_reconciler_is_resolved_as_succeeded(
    db_url: str, tmp_path: Path
) -> None:
    thread = "eff-manual-ok"
    service = tmp_path / "service.db"
    env, key = _cut_off_call(db_url, tmp_path, "manual", thread)

    _waiting_for_person(db_url, thread, key, env)
    # resuming again without an answer still pauses and never calls the service
    _waiting_for_person(db_url, thread, key, env, cli=False)
    assert effect_task.service_calls(service) == [(key, AMOUNT)]
    [row] = _ledger(db_url, thread)
    assert (row["status"], row["calls"]) == ("started", 1)

    resolved = run_cli(
        "effects",
        "resolve",
        thread,
        key,
        "--succeeded",
        "--result",
        json.dumps({"charged": AMOUNT}),
        "--by",
        "ops",
        db=db_url,
        env=env,
    )
    assert resolved.returncode == 0, resolved.stdout + resolved.stderr
    assert f"thread {thread} completed" in resolved.stdout

    assert effect_task.service_calls(service) == [(key, AMOUNT)]
    [row] = _ledger(db_url, thread, cli=True)
    assert (row["key"], row["status"], row["calls"]) == (key, "succeeded", 1)
    assert row["result"] == {"charged": AMOUNT}
    status = _status(db_url, thread)
    assert status["status"] == "completed" and status["waiting"] == []
    with Runner(db_url) as runner:
        # the person's result is the step's result and what the next step used
        assert runner.result(thread, "pay") == {"charged": AMOUNT}
        assert runner.result(thread, "receipt") == {"charged": AMOUNT, "pay": {"charged": AMOUNT}}
        kinds = [e.kind for e in runner.events(thread)]
        assert "effect.unknown" in kinds
        [manual] = runner.events(thread, kinds=["manual.resolve"])
        assert manual.step == "pay"
        assert manual.data == {"key": key, "outcome": "succeeded", "by": "ops"}
        assert kinds.count("longtask.completed") == 1


def test_cut_off_call_without_reconciler_is_retried_when_told(db_url: str, tmp_path: Path) -> None:
    thread = "eff-manual-retry"
    service = tmp_path / "service.db"
    env, key = _cut_off_call(db_url, tmp_path, "manual", thread)
    _waiting_for_person(db_url, thread, key, env)
    assert effect_task.service_calls(service) == [(key, AMOUNT)]

    resolved = run_cli(
        "effects", "resolve", thread, key, "--retry", "--by", "ops", db=db_url, env=env
    )
    assert resolved.returncode == 0, resolved.stdout + resolved.stderr
    assert f"thread {thread} completed" in resolved.stdout

    # exactly a second call, under the same idempotency key: the ledger's key
    assert effect_task.service_calls(service) == [(key, AMOUNT), (key, AMOUNT)]
    [row] = _ledger(db_url, thread)
    charged = {"charged": AMOUNT, "key": key}
    assert (row["key"], row["status"], row["calls"], row["error"]) == (key, "succeeded", 2, None)
    assert row["result"] == charged
    with Runner(db_url) as runner:
        assert runner.status(thread).status == "completed"
        assert runner.result(thread, "receipt") == {"charged": AMOUNT, "pay": charged}
        [manual] = runner.events(thread, kinds=["manual.resolve"])
        assert manual.data == {"key": key, "outcome": "retry", "by": "ops"}


def test_cut_off_call_resolved_as_failed_fails_the_step(db_url: str, tmp_path: Path) -> None:
    thread = "eff-manual-failed"
    service = tmp_path / "service.db"
    env, key = _cut_off_call(db_url, tmp_path, "manual", thread)
    _waiting_for_person(db_url, thread, key, env, cli=False)

    resolved = run_cli(
        "effects", "resolve", thread, key, "--failed", "--by", "ops", db=db_url, env=env
    )
    # a person said the charge failed: it must not be charged again behind their back
    assert effect_task.service_calls(service) == [(key, AMOUNT)]
    assert resolved.returncode == 1, resolved.stdout + resolved.stderr
    status = _status(db_url, thread)
    assert status["status"] == "failed"
    assert status["error"]["step"] == "pay" and status["error"]["type"] == "EffectFailed"
    # reported once: a later resume is a decision to try again, and calls once more
    again = run_cli("resume", thread, db=db_url, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert effect_task.service_calls(service) == [(key, AMOUNT), (key, AMOUNT)]


@pytest.mark.parametrize("task", ["reconciled", "manual"])
def test_crash_before_the_call_leaves_no_ledger_row(db_url: str, tmp_path: Path, task: str) -> None:
    thread = f"eff-before-{task}"
    service = tmp_path / "service.db"
    env = _env(tmp_path, effect_task.CRASH_BEFORE_EFFECT)
    _crashed_run(db_url, tmp_path, task, thread, env)
    assert _ledger(db_url, thread, cli=True) == []
    assert effect_task.service_calls(service) == []

    resumed = run_cli("resume", thread, db=db_url, env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"thread {thread} completed" in resumed.stdout

    [(key, amount)] = effect_task.service_calls(service)
    assert amount == AMOUNT
    [row] = _ledger(db_url, thread)
    charged = {"charged": AMOUNT, "key": key}
    assert (row["key"], row["status"], row["calls"], row["result"]) == (
        key,
        "succeeded",
        1,
        charged,
    )
    runs = effect_task.step_runs(service)
    assert [s for s, _ in runs] == ["pay", "pay"] and runs[0][1] != runs[1][1]
    with Runner(db_url) as runner:
        assert runner.result(thread, "receipt") == {"charged": AMOUNT, "pay": charged}
        kinds = [e.kind for e in runner.events(thread)]
        assert kinds.count("effect.started") == 1 and kinds.count("effect.succeeded") == 1
        assert "effect.unknown" not in kinds


#: ``longtask ARGS`` that dies (``os._exit``) right after the ledger write of a resolve:
#: before the thread continues, as a kill in that moment leaves it (issue 28, item 4)
DIES_AFTER_SETTLE = """\
import os, sys
from longtask.store import _effects

settle = _effects.EffectTables.effect_finish

def effect_finish(self, *args, **kwargs):
    settle(self, *args, **kwargs)
    os._exit(9)

_effects.EffectTables.effect_finish = effect_finish
from longtask.cli import main
main(sys.argv[1:])
"""


def test_a_resolve_killed_after_the_ledger_write_is_finished_by_its_own_command(
    db_url: str, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    thread = "eff-resolve-killed"
    service = tmp_path / "service.db"
    env, key = _cut_off_call(db_url, tmp_path, "manual", thread)
    _waiting_for_person(db_url, thread, key, env)
    answer = ["--succeeded", "--result", json.dumps({"charged": AMOUNT}), "--by", "ops"]
    killed = subprocess.run(
        [sys.executable, "-c", DIES_AFTER_SETTLE, "effects", "resolve", thread, key, *answer],
        env={**os.environ, "LONGTASK_DB": db_url, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == 9, killed.stdout + killed.stderr
    _wait_inactive(db_url, thread)
    [row] = _ledger(db_url, thread)
    assert row["status"] == "succeeded"
    # the pause and its command are still there ...
    status = _status(db_url, thread, cli=True)
    assert status["status"] == "waiting_user" and status["waiting"][0]["key"] == key
    shown = run_cli("status", thread, db=db_url)
    assert f"longtask effects resolve {thread} {key} --succeeded --result JSON" in shown.stdout

    # ... another answer is refused, naming the one that continues it, and changes nothing
    other = run_cli("effects", "resolve", thread, key, "--retry", db=db_url, env=env)
    assert other.returncode == 1, other.stdout + other.stderr
    assert (
        f"was already resolved as succeeded and the thread did not go on; continue it with "
        f"`longtask effects resolve {thread} {key} --succeeded`" in other.stderr
    ), other.stderr
    assert _status(db_url, thread)["status"] == "waiting_user"

    # ... and the printed command, pasted, continues the thread once
    again = run_cli("effects", "resolve", thread, key, *answer, db=db_url, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"thread {thread} completed" in again.stdout
    assert effect_task.service_calls(service) == [(key, AMOUNT)]
    with Runner(db_url) as runner:
        assert runner.status(thread).status == "completed"
        assert runner.result(thread, "receipt") == {"charged": AMOUNT, "pay": {"charged": AMOUNT}}
        [manual] = runner.events(thread, kinds=["manual.resolve"])
        assert manual.data == {"key": key, "outcome": "succeeded", "by": "ops"}
