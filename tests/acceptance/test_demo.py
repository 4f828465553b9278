"""``longtask demo``: the migration LongTask end to end, as a user runs it (subprocesses)."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from conftest import run_cli

from longtask import Runner

STAGES = [
    "setup",
    "analysis",
    "design",
    "plan_approval",
    "code",
    "verify",
    "ci",
    "release_approval",
    "docs",
    "publish",
]


def _db(root: Path) -> str:
    return f"sqlite:///{root / '.longtask' / 'longtask.db'}"


def _tests_pass(worktree: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=worktree,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _model_calls(root: Path) -> list[dict[str, object]]:
    path = root / ".longtask" / "model-requests.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _pauses_answered_by_the_demo(runner: Runner, thread: str) -> None:
    """The approvals and the CI wait went through the real pause path, answered by --yes."""
    kinds = ["approval.required", "approval.resolved", "wait.started", "wait.resolved"]
    story = [(e.kind, e.step, (e.data or {}).get("by")) for e in runner.events(thread, kinds=kinds)]
    assert story == [
        ("approval.required", "approve_plan", None),
        ("approval.resolved", "approve_plan", "demo --yes"),
        ("wait.started", "ci", None),
        ("wait.resolved", "ci", "demo --yes"),
        ("approval.required", "approve_release", None),
        ("approval.resolved", "approve_release", "demo --yes"),
    ]
    assert runner.result(thread, "approve_release")["by"] == "demo --yes"
    assert runner.result(thread, "ci")["status"] == "passed"


def test_demo_runs_the_migration(tmp_path: Path) -> None:
    # Run from a clone's directory: the demo puts nothing there, but in a new directory
    # under the temporary directory, which it names first.
    clone, tmp = tmp_path / "clone", tmp_path / "tmp"
    clone.mkdir()
    tmp.mkdir()
    done = run_cli(
        "demo", "--yes", db="sqlite:///unused.db", cwd=clone, env={"TMPDIR": str(tmp)}, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(clone.iterdir()) == []
    first = done.stdout.splitlines()[0]
    assert first.startswith("demo directory: "), done.stdout
    root = Path(first.removeprefix("demo directory: ").split(" (")[0])
    assert root.parent == tmp and root.name.startswith("longtask-demo-")
    assert "offline demo model" in done.stdout
    # One view of the steps: each finished step once, under its stage.
    for step in ("prepare", "approve_plan", "ci", "approve_release", "publish"):
        assert done.stdout.count(f"✓ {step}\n") == 1, done.stdout
    # The failing test, the fix round, then verify passing (issue 29, item 10).
    lines = done.stdout.splitlines()
    at = lines.index("  ✓ verify (after 1 fix round)")
    assert lines[at - 2] == (
        "  ✗ verify: FAILED tests/test_api.py::test_tampered_credentials - assert 200 == 401"
    ), done.stdout
    assert lines[at - 1].startswith("    fix round 1 of 3: the fix_tests agent"), done.stdout
    assert "completed: 11 steps, 1 fix round" in done.stdout
    requests = root / ".longtask" / "model-requests.jsonl"
    assert f"model requests are logged to {requests}" in done.stdout
    assert requests.read_text().count("\n") >= 1
    worktree = root / "authsvc-jwt"
    assert (worktree / "MIGRATION.md").is_file()
    assert (root / "migration.patch").read_text().startswith("From ")
    assert not (worktree / "authsvc" / "sessions.py").exists()
    _tests_pass(worktree)
    log = subprocess.run(
        ["git", "-C", str(root / "authsvc"), "log", "--format=%s", "jwt-migration"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert log == ["Move authentication to JWT", "authsvc with sessions"]
    with Runner(_db(root)) as runner:
        (thread,) = [t.thread_id for t in runner.threads()]
        status = runner.status(thread)
        assert status.status == "completed"
        completed = [e.stage for e in runner.events(thread, kinds=["stage.completed"])]
        assert completed == STAGES
        assert next(s for s in status.steps if s.name == "verify").fix_rounds == 1
        assert {a.name for a in runner.artifacts(thread)} >= {"migration.patch", "MIGRATION.md"}
        calls = runner.events(thread, kinds=["model.call"])
        assert {e.data["model"] for e in calls} == {"longtask-offline-demo"}
        assert {e.data["model_requested"] for e in calls} == {"longtask-offline-demo"}
        _pauses_answered_by_the_demo(runner, thread)


def test_demo_crash_in_verify_then_resume(tmp_path: Path) -> None:
    root = tmp_path / "crash"
    db = _db(root)
    crashed = run_cli("demo", "--dir", str(root), "--crash-at", "verify", db=db, timeout=300)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    assert "crashing on purpose inside step 'verify'" in crashed.stdout
    with Runner(db) as runner:
        (thread,) = [t.thread_id for t in runner.threads()]
        assert runner.status(thread).status == "running"
    assert f"continue with: longtask demo --dir {root} --yes" in crashed.stdout
    before = _model_calls(root)
    resumed = run_cli("demo", "--dir", str(root), "--yes", db=db, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"continuing thread {thread}" in resumed.stdout
    _tests_pass(root / "authsvc-jwt")
    calls = _model_calls(root)
    # every model call answered once: the resumed run made only the calls after the crash
    assert len({c["request"] for c in calls}) == len(calls)
    assert calls[: len(before)] == before
    assert Counter((c["agent"], c["turn"]) for c in calls).most_common(1)[0][1] == 1
    with Runner(db) as runner:
        assert runner.status(thread).status == "completed"
        edits = [e for e in runner.effects(thread) if e.name.startswith("tool:")]
        assert edits and all(e.calls == 1 and e.status == "succeeded" for e in edits)
        stages = [e.stage for e in runner.events(thread, kinds=["stage.completed"])]
        assert stages == STAGES
        _pauses_answered_by_the_demo(runner, thread)
        # The crash is in the record, as the README shows (issue 45): the dead attempt is
        # named by the next run, and the attempt after it is #2.
        (recovered,) = runner.events(thread, kinds=["longtask.recovered"])
        assert recovered.data["abandoned"] == ["verify"], recovered.data
        started = [e for e in runner.events(thread, kinds=["step.started"]) if e.step == "verify"]
        assert [e.attempt for e in started][:2] == [1, 2], started
        # and in the report's errors, not "no errors"
        report = runner.report(thread, tmp_path / "report.md").read_text()
        assert "| verify | 1 | process died | abandoned |" in report, report
    # Issue 45: at 80 columns the fix agent's usage row is one line, its name whole.
    shown = run_cli("status", thread, db=db, env={"COLUMNS": "80"})
    assert shown.returncode == 0, shown.stdout + shown.stderr
    (fixer,) = [ln for ln in shown.stdout.splitlines() if ln.startswith("fix_tests")]
    assert fixer.startswith("fix_tests (fix agent) "), shown.stdout
    # A finished demo is not run again in its directory: it says what it did.
    again = run_cli("demo", "--dir", str(root), "--yes", db=db)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{root} holds a completed demo" in again.stdout
    assert f"thread {thread} completed" in again.stdout


def _paste(line: str, cwd: Path, **fill: str) -> subprocess.CompletedProcess[str]:
    """A printed command line run as pasted (placeholders filled), in a directory with no
    database and without $LONGTASK_DB: it works only if it names the demo's database."""
    words = [fill.get(w, w) for w in shlex.split(line)]
    assert words[0] == "longtask", line
    return run_cli(*words[1:], db="", cwd=cwd, timeout=300)


def _printed(output: str, prefix: str) -> str:
    found = [ln.strip() for ln in output.splitlines() if ln.strip().startswith(prefix)]
    assert found, (prefix, output)
    return found[-1]


def test_every_command_the_demo_prints_works_when_pasted(tmp_path: Path) -> None:
    """Issue 29, points 2 and 6: the effect to settle after a crash (`effects resolve`, with
    the demo's --db), the approval, and the demo's last hint (`longtask demo --dir D`, which
    tells what happened and where the outputs are once the last approval finished it)."""
    root = tmp_path / "demo dir"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    db = _db(root)
    crashed = run_cli("demo", "--dir", str(root), "--crash-at", "backend", db=db, timeout=300)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    again = _paste(
        _printed(crashed.stdout, "!! continue with: ")[len("!! continue with: ") :], elsewhere
    )
    assert again.returncode == 3, again.stdout + again.stderr
    resolve = _printed(again.stdout, "longtask effects resolve")
    command, alternatives = resolve.split("  (or ")
    assert command.endswith(" --succeeded --result JSON") and "--retry" in alternatives
    # the file the cut-off write was making is not there: the honest answer is --retry
    resolved = _paste(command.replace(" --succeeded --result JSON", " --retry"), elsewhere)
    # A kill that lands while parallel steps are mid-write cuts off more than one effect:
    # each is asked about in turn, with its own pasteable command.
    for _ in range(5):
        assert resolved.returncode == 3, resolved.stdout + resolved.stderr
        if "waiting_external" in resolved.stdout:
            break
        more = _printed(resolved.stdout, "longtask effects resolve").split("  (or ")[0]
        resolved = _paste(more.replace(" --succeeded --result JSON", " --retry"), elsewhere)
    # the thread goes on to the CI wait (which the demo simulates)
    assert resolved.returncode == 3, resolved.stdout + resolved.stderr
    assert "waiting_external" in resolved.stdout
    demo = _paste(
        _printed(again.stdout, "then continue the demo: ")[
            len("then continue the demo: ") :
        ].replace(" --yes", ""),
        elsewhere,
    )
    assert demo.returncode == 3, demo.stdout + demo.stderr
    approve = _printed(demo.stdout, "longtask approve")
    approved = _paste(approve, elsewhere, YOUR_NAME="alice")
    assert approved.returncode == 0, approved.stdout + approved.stderr
    last = _paste(_printed(demo.stdout, "longtask demo --dir"), elsewhere)
    assert last.returncode == 0, last.stdout + last.stderr
    assert "holds a completed demo" in last.stdout
    assert f"MIGRATION.md: {root / 'authsvc-jwt' / 'MIGRATION.md'}" in last.stdout
    events = _paste(_printed(last.stdout, "events:")[len("events:") :].strip(), elsewhere)
    assert events.returncode == 0 and "longtask.completed" in events.stdout
    assert not (elsewhere / ".longtask").exists()
