"""Answers from the command line that must not be stored as given (issue 28, items 6 and
8), both backends: text with no UTF-8 form (an invalid byte in an argument) is refused
before anything is stored, and ``resume --resume`` decides as the caller, never as the
``by`` its payload names."""

from __future__ import annotations

import json

from conftest import run_cli
from test_approval_cli import STEP, TASK_REF, cli_refused, paused_at_approval, status

from longtask import Runner
from longtask.runtime import load_task


def test_an_invalid_byte_in_a_comment_or_payload_is_refused(db_url: str) -> None:
    thread = "cli-odd"
    paused_at_approval(db_url, thread)
    # Python decodes the byte 0xff of an argument to the lone surrogate \udcff.
    cli_refused(
        db_url,
        thread,
        "approve",
        thread,
        STEP,
        "--by",
        "alice",
        "--comment",
        "bad \udcff byte",
        expect=["the answer['comment'] (character 4", "not valid Unicode text"],
    )
    # who acts passes the one check of every --by (issue 39): a usage error, nothing opened
    before_by = status(db_url, thread)
    refused = run_cli("approve", thread, STEP, "--by", "ali\udcffce", db=db_url)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    [error] = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
    assert "who acts" in error and "not valid Unicode text" in error, error
    after_by = status(db_url, thread)
    assert (after_by.checkpoint_id, after_by.status, after_by.runs) == (
        before_by.checkpoint_id,
        before_by.status,
        before_by.runs,
    )
    task = load_task(TASK_REF)
    with Runner(db_url) as runner:
        runner.start(task, {"version": "2.0.1"}, thread_id="cli-odd-ci")
    before = status(db_url, "cli-odd-ci")
    payload = json.dumps({"status": "passed", "url": "\udcff"}, ensure_ascii=False)
    refused = run_cli("signal", "cli-odd-ci", "ci", "--payload", payload, db=db_url)
    assert refused.returncode == 2, refused.stdout + refused.stderr  # a usage error
    assert "--payload" in refused.stderr and "not valid Unicode text" in refused.stderr
    assert "internal error" not in refused.stderr
    after = status(db_url, "cli-odd-ci")
    assert (after.checkpoint_id, after.status) == (before.checkpoint_id, before.status)
    ok = run_cli("approve", thread, STEP, "--by", "bob", "--comment", "fine", db=db_url)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert status(db_url, thread).status == "completed"


def test_resume_decides_as_the_caller_not_as_the_payload_says(db_url: str) -> None:
    thread = "cli-by"
    paused_at_approval(db_url, thread)
    plan_hash = status(db_url, thread).waiting[0]["plan_hash"]
    forged = json.dumps({"approved": True, "by": "alice", "plan_hash": plan_hash})
    cli_refused(
        db_url,
        thread,
        "resume",
        thread,
        "--resume",
        forged,
        "--by",
        "bob",
        expect=["names 'alice' as its approver, but it is given by 'bob'"],
    )
    decision = json.dumps({"approved": True, "plan_hash": plan_hash, "comment": "go"})
    ok = run_cli("resume", thread, "--resume", decision, "--by", "bob", db=db_url)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    with Runner(db_url) as runner:
        assert runner.status(thread).status == "completed"
        resolved = runner.events(thread, kinds=["approval.resolved"])
        assert [e.data["by"] for e in resolved] == ["bob"]
        assert runner.result(thread, STEP)["by"] == "bob"


def test_resume_without_by_decides_as_this_user(db_url: str) -> None:
    thread = "cli-by-me"
    paused_at_approval(db_url, thread)
    plan_hash = status(db_url, thread).waiting[0]["plan_hash"]
    forged = json.dumps({"approved": True, "by": "alice", "plan_hash": plan_hash})
    # This user (root, or whoever runs the tests) is not alice: refused, whatever it says.
    cli_refused(
        db_url,
        thread,
        "resume",
        thread,
        "--resume",
        forged,
        expect=["names 'alice' as its approver, but it is given by"],
    )
    assert status(db_url, thread).status == "waiting_user"
