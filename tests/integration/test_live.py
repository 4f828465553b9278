"""Progress, artifacts and following a thread, against every backend."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from longtask import InvalidInput, LongTask, Runner, Stage, StepContext, approval, function_step


def test_progress_is_rate_limited_and_keeps_the_last(runner: Runner) -> None:
    def busy(ctx: StepContext) -> int:
        for i in range(1, 2001):
            ctx.progress(i, 2000, "crunching")
        return 2000

    task = LongTask("busy", stages=[Stage("s", [function_step(busy, name="busy")])])
    thread = runner.start(task, thread_id="t-progress")
    progress = runner.events(thread, kinds=["step.progress"])
    assert 1 <= len(progress) <= 20  # 2000 calls in well under 10 s
    assert progress[-1].data == {"done": 2000, "total": 2000, "message": "crunching"}
    assert progress[0].step == "busy"


def test_artifacts_are_stored_once_and_kept_out_of_checkpoints(
    runner: Runner, tmp_path: Path
) -> None:
    big = ("line of a long report\n" * 20_000).encode()  # ~440 kB
    source = tmp_path / "patch.diff"
    source.write_text("--- a\n+++ b\n")

    def report(ctx: StepContext) -> dict[str, Any]:
        return {
            "report": ctx.artifact("report.txt", big, media_type="text/plain"),
            "note": ctx.artifact("note.md", "# done"),
            "patch": ctx.artifact("patch.diff", path=source, media_type="text/x-diff"),
        }

    task = LongTask("arts", stages=[Stage("s", [function_step(report, name="report")])])
    thread = runner.start(task, thread_id="t-arts")
    refs = runner.result(thread, "report")
    assert refs["report"]["size"] == len(big) and refs["report"]["artifact"] == "report.txt"
    listed = {a.name: a for a in runner.artifacts(thread)}
    assert set(listed) == {"report.txt", "note.md", "patch.diff"}
    assert listed["note.md"].media_type == "text/plain; charset=utf-8"
    assert listed["report.txt"].step == "report"
    data, record = runner.artifact(thread, "report.txt")
    assert data == big and record.digest == refs["report"]["digest"]
    assert runner.artifact(thread, "patch.diff")[0] == source.read_bytes()
    created = runner.events(thread, kinds=["artifact.created"])
    assert sorted(e.data["name"] for e in created) == ["note.md", "patch.diff", "report.txt"]
    # the checkpoint holds the small reference, not the content
    tup = runner.db.saver.get_tuple({"configurable": {"thread_id": thread}})
    assert tup is not None and b"line of a long report" not in repr(tup.checkpoint).encode()
    with pytest.raises(InvalidInput, match="no artifact 'nope'"):
        runner.artifact(thread, "nope")


def test_artifact_names_are_checked(runner: Runner) -> None:
    def bad(ctx: StepContext) -> None:
        ctx.artifact(" spaced ", "x")

    task = LongTask("bad", stages=[Stage("s", [function_step(bad, name="bad")])])
    from longtask import StepFailed

    with pytest.raises(StepFailed, match="artifact name ' spaced ' is not allowed"):
        runner.start(task, thread_id="t-badname")


def test_follow_yields_each_event_once_until_the_thread_pauses(runner: Runner, db_url: str) -> None:
    gate = threading.Event()

    def slow(ctx: StepContext) -> str:
        gate.wait(20)
        return "slow"

    task = LongTask(
        "paused",
        stages=[
            Stage("a", [function_step(slow, name="slow")]),
            Stage("b", [approval("ok", plan=lambda ctx: {"go": True})]),
        ],
    )
    worker = threading.Thread(target=lambda: Runner(db_url).start(task, thread_id="t-live-follow"))
    worker.start()
    seen: list[Any] = []
    try:
        while runner.db.store.get_thread("t-live-follow") is None:
            threading.Event().wait(0.02)
        follower = runner.follow("t-live-follow", stop_when_paused=True)
        seen.append(next(follower))  # longtask.started (or the first event stored)
        gate.set()
        seen.extend(follower)
    finally:
        gate.set()
        worker.join(30)
    stored = runner.events("t-live-follow")
    assert [e.id for e in seen] == [e.id for e in stored]
    assert stored[-1].kind in ("approval.required", "stage.started", "step.started"), [
        (e.kind, e.step) for e in stored
    ]
    assert runner.status("t-live-follow").status == "waiting_user"
