"""Promise 7, definitions drift safely: resuming a thread whose task definition changed is
refused with an error naming the changed steps and leaves the thread as it was, until the
user passes ``--allow-changed-definition`` (both backends)."""

from __future__ import annotations

from pathlib import Path

from conftest import run_cli

from longtask import Runner

HEADER = """\
from longtask import LongTask, Stage, function_step


@function_step
def a(ctx):
    return 1
"""

# v1: `b` is broken, so the thread stops there with `c` and `d` never run.
V1 = (
    HEADER
    + """

@function_step
def b(ctx):
    raise RuntimeError("b is broken")


@function_step
def c(ctx):
    return ctx.result("b") + 1


@function_step
def d(ctx):
    return 10


task = LongTask(
    "drift",
    stages=[Stage("one", [a]), Stage("two", [b]), Stage("three", [c, d])],
)
"""
)

# v2: `b` is fixed (a body change alone would not count), `d` now runs after `c`, and a
# new stage with a new step `e` is added.
V2 = (
    HEADER
    + """

@function_step
def b(ctx):
    return ctx.result("a") + 1


@function_step
def c(ctx):
    return ctx.result("b") + 1


@function_step(after=["c"])
def d(ctx):
    return ctx.result("c") + 10


@function_step
def e(ctx):
    return ctx.result("d") + 1


task = LongTask(
    "drift",
    stages=[Stage("one", [a]), Stage("two", [b]), Stage("three", [c, d]), Stage("four", [e])],
)
"""
)


def test_changed_definition_is_refused_then_allowed(db_url: str, tmp_path: Path) -> None:
    thread = "drifting"
    task_file = tmp_path / "drift_task.py"
    task_file.write_text(V1)
    # the file is rewritten within the same second: never let a stale .pyc stand in for it
    env = {"PYTHONDONTWRITEBYTECODE": "1"}

    failed = run_cli("run", f"{task_file}:task", "--thread", thread, db=db_url, env=env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "b is broken" in failed.stderr
    with Runner(db_url) as runner:
        before = runner.status(thread)
        history_before = [v.checkpoint_id for v in runner.history(thread, limit=1000)]
        events_before = len(runner.events(thread))
    assert before.status == "failed"
    assert [s.name for s in before.steps] == ["a", "b", "c", "d"]
    assert before.checkpoint_id is not None

    task_file.write_text(V2)
    refused = run_cli("resume", thread, db=db_url, env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    err = refused.stderr
    assert err.startswith("error: "), err
    assert "Traceback" not in err
    assert "step 'd' changed" in err, err  # its dependencies changed
    assert "step 'e' was added" in err, err
    assert "step 'a'" not in err and "step 'b'" not in err and "step 'c'" not in err, err
    assert "--allow-changed-definition" in err

    # Nothing moved: same checkpoint, same status, same run count, old definition kept.
    with Runner(db_url) as runner:
        after = runner.status(thread)
        assert after.checkpoint_id == before.checkpoint_id
        assert after.status == "failed"
        assert after.runs == before.runs
        assert [s.name for s in after.steps] == ["a", "b", "c", "d"]
        assert [v.checkpoint_id for v in runner.history(thread, limit=1000)] == history_before
        assert len(runner.events(thread)) == events_before

    allowed = run_cli("resume", thread, "--allow-changed-definition", db=db_url, env=env)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert f"thread {thread} completed" in allowed.stdout

    with Runner(db_url) as runner:
        done = runner.status(thread)
        assert done.status == "completed"
        assert [s.name for s in done.steps] == ["a", "b", "c", "d", "e"]
        assert {s.state for s in done.steps} == {"completed"}
        assert runner.results(thread) == {"a": 1, "b": 2, "c": 3, "d": 13, "e": 14}
        assert len(runner.events(thread)) > events_before


WAITS = (
    HEADER.replace("function_step", "function_step, wait_for", 1)
    + """

task = LongTask("drift_wait", stages=[Stage("one", [a]), Stage("ci", [wait_for("ci")])])
"""
)


def test_an_answer_with_allow_changed_definition_is_allowed(db_url: str, tmp_path: Path) -> None:
    # Issue 28, item 12: resume --resume V --allow-changed-definition was refused with a
    # message telling the user to pass --allow-changed-definition.
    thread = "drift-wait"
    task_file = tmp_path / "drift_wait_task.py"
    task_file.write_text(WAITS)
    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    paused = run_cli("run", f"{task_file}:task", "--thread", thread, db=db_url, env=env)
    assert paused.returncode == 3, paused.stdout + paused.stderr
    task_file.write_text(WAITS.replace('Stage("one", [a])', 'Stage("first", [a])'))
    answer = ["resume", thread, "--resume", '{"ok": true}', "--interrupt", "ci"]
    refused = run_cli(*answer, db=db_url, env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "--allow-changed-definition" in refused.stderr
    allowed = run_cli(*answer, "--allow-changed-definition", db=db_url, env=env)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    with Runner(db_url) as runner:
        assert runner.status(thread).status == "completed"
        assert runner.result(thread, "ci") == {"ok": True}
