"""Every kind of step is numbered after an attempt a killed process abandoned (issue 39).

For each kind of step that does work (function, map, agent, graph, sub-task, whose work is
numbered in its child thread; the list is read from the model, so a new kind must join), a
``longtask`` process runs the task's one step ``work``, which holds mid-step; the test waits
until the attempt's ``step.started`` is stored, kills the process with SIGKILL, and does so
twice; a third process completes the step. The log must then read: started #1, abandoned #1
(pointing at started #1), started #2, abandoned #2 (pointing at started #2), started #3,
completed #3. Before the fix, map and agent steps started at #1 after every crash, and the
second ``step.abandoned`` (#2) pointed at a ``step.started`` #1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli
from fakes import FakeOpenAI, Reply, by_turn

from longtask import Runner
from longtask.model import PauseStep, Step, child_thread_id

HERE = Path(__file__).resolve().parent
TASKS = {
    "FunctionStep": "FUNCTION",
    "MapStep": "MAP",
    "AgentStep": "AGENT",
    "GraphStep": "GRAPH",
    "SubtaskStep": "SUBTASK",
}
#: the thread whose log numbers a kind's attempts, if not the one started: a sub-task
#: step's work is its child's
WATCHED = {"SubtaskStep": lambda thread: child_thread_id(thread, "work", 0, 1)}
CRASHES = 2


def _working_kinds() -> set[str]:
    """Every concrete kind of step except the pauses (which wait rather than work)."""
    found: set[str] = set()
    todo = list(Step.__subclasses__())
    while todo:
        kind = todo.pop()
        todo.extend(kind.__subclasses__())
        if not issubclass(kind, PauseStep):
            found.add(kind.__name__)
    return found


def test_every_kind_of_working_step_is_covered() -> None:
    assert set(TASKS) == _working_kinds()


def _started(db: str, thread: str) -> int:
    with Runner(db) as runner:
        return sum(1 for e in runner.events(thread, kinds=["step.started"]) if e.step == "work")


@pytest.mark.parametrize("kind", sorted(TASKS))
def test_a_step_killed_twice_is_numbered_on(db_url: str, tmp_path: Path, kind: str) -> None:
    thread = f"t-{kind.lower()}"
    watched = WATCHED.get(kind, lambda t: t)(thread)
    go = tmp_path / "go"
    script = [Reply.tool_calls([("wait_for_go", {"reason": "work"})]), Reply.text("worked")]
    with FakeOpenAI(by_turn(script)) as server:
        extra = {
            "LT_GO": str(go),
            "OPENAI_API_KEY": "sk-test-numbering",
            "OPENAI_BASE_URL": server.base_url,
        }
        env = {**os.environ, "LONGTASK_DB": db_url, **extra}
        ref = f"{HERE / 'numbering_task.py'}:{TASKS[kind]}"
        for crash in range(1, CRASHES + 1):
            args = ["run", ref, "--thread", thread] if crash == 1 else ["resume", thread]
            proc = subprocess.Popen(
                [sys.executable, "-m", "longtask", *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            deadline = time.monotonic() + 60
            while not (_exists(db_url, watched) and _started(db_url, watched) >= crash):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, f"attempt {crash} never started"
                time.sleep(0.1)
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
        go.write_text("go")
        done = run_cli("resume", thread, db=db_url, env=extra)
        assert done.returncode == 0, done.stdout + done.stderr

    with Runner(db_url) as runner:
        assert runner.status(thread).status == "completed"
        assert runner.status(watched).status == "completed"
        events = [
            e
            for e in runner.events(watched)
            if e.step == "work" and e.kind.startswith("step.") and e.kind != "step.progress"
        ]
    got = [(e.kind, e.attempt) for e in events]
    want = []
    for n in range(1, CRASHES + 1):
        want += [("step.started", n), ("step.abandoned", n)]
    want += [("step.started", CRASHES + 1), ("step.completed", CRASHES + 1)]
    assert got == want
    by_id = {e.id: e for e in events}
    for abandoned in (e for e in events if e.kind == "step.abandoned"):
        pointed = by_id[abandoned.data["started_event"]]
        assert (pointed.kind, pointed.attempt) == ("step.started", abandoned.attempt)
        assert abandoned.data["next_attempt"] == abandoned.attempt + 1


def _exists(db: str, thread: str) -> bool:
    with Runner(db) as runner:
        return runner.db.store.get_thread(thread) is not None


def test_a_kill_after_an_attempt_with_effects_succeeded_abandons_that_attempt(
    db_url: str, tmp_path: Path
) -> None:
    # Attempt #1 is killed mid-step; attempt #2 runs its effect and ends, and its process
    # dies after the step's attempt count was forgotten, before its checkpoint: the next
    # run abandons #2 (it used to say #1, reading the count that was gone) and runs #3,
    # which replays the effect rather than running it again.
    thread = "t-effect"
    go, charges = tmp_path / "go", tmp_path / "charges"
    extra = {"LT_GO": str(go), "LT_CHARGES": str(charges)}
    env = {**os.environ, "LONGTASK_DB": db_url, **extra}
    ref = f"{HERE / 'numbering_task.py'}:EFFECT"
    proc = subprocess.Popen(
        [sys.executable, "-m", "longtask", "run", ref, "--thread", thread],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (_exists(db_url, thread) and _started(db_url, thread) >= 1):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "attempt 1 never started"
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    go.write_text("go")
    died = run_cli("resume", thread, db=db_url, env={**extra, "LT_EXIT_AFTER_CLEAR": "1"})
    assert died.returncode == 9, died.stdout + died.stderr
    done = run_cli("resume", thread, db=db_url, env=extra)
    assert done.returncode == 0, done.stdout + done.stderr

    with Runner(db_url) as runner:
        assert runner.status(thread).status == "completed"
        events = [
            e
            for e in runner.events(thread)
            if e.step == "work" and e.kind.startswith("step.") and e.kind != "step.progress"
        ]
        effects = [e.kind for e in runner.events(thread) if e.kind.startswith("effect.")]
    assert [(e.kind, e.attempt) for e in events] == [
        ("step.started", 1),
        ("step.abandoned", 1),
        ("step.started", 2),
        ("step.abandoned", 2),
        ("step.started", 3),
        ("step.completed", 3),
    ]
    by_id = {e.id: e for e in events}
    for abandoned in (e for e in events if e.kind == "step.abandoned"):
        pointed = by_id[abandoned.data["started_event"]]
        assert (pointed.kind, pointed.attempt) == ("step.started", abandoned.attempt)
        assert abandoned.data["next_attempt"] == abandoned.attempt + 1
    assert charges.read_text().splitlines() == ["5"]  # the effect ran once
    assert effects == ["effect.started", "effect.succeeded"]
