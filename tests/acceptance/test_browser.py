"""The web page in a real browser, against a real ``longtask serve`` process.

A weekly report thread waits for its CI event. The page (headless Chromium, driven by
Playwright) shows it; the event arrives from another process and the page shows the approval
and its plan (a multi-line string as a text block) without a reload; a wrong token is refused
on the page; with the right token Approve continues the thread, and the page shows it
completed, live, with its artifacts to download. A thread that does not exist gets a page
that says so.

Needs /usr/bin/chromium (Debian package ``chromium``) and the ``playwright`` package: without
them the test is skipped, except when ``CI`` is set, where it fails.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import web_task  # the task module (tests/acceptance is on sys.path), for its constants
from conftest import ROOT, run_cli

from longtask import Runner
from longtask.runtime import load_task

HERE = Path(__file__).resolve().parent
TASK_REF = f"{HERE / 'web_task.py'}:task"
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "tests" / "artifacts"
#: the docs' picture of the page waiting for an approval: refreshed from a run's
#: screenshot with LT_UPDATE_DOCS_IMAGE=1 (a normal run leaves the tracked file alone)
README_IMAGE = ROOT / "docs" / "images" / "web-page.png"
THREAD = "weekly-2030-08"
TOKEN = "tok-alice-7f3c9a"
STEP = "approve_publish"
WAIT = 30_000  # ms: how long the page may take to show a change


def _need(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: the browser test must run)")
    pytest.skip(reason)


@pytest.fixture
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        _need(f"{CHROMIUM} is missing; install it with `apt-get install chromium`")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need("the playwright package is not installed")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(sqlite_url: str) -> Iterator[str]:
    """A ``longtask serve`` process on a free port; yields its base URL."""
    port = _free_port()
    env = {**os.environ, "LONGTASK_API_TOKENS": f"alice={TOKEN}:admin"}
    env.pop("LONGTASK_API_TOKEN", None)
    args = ["serve", "--host", "127.0.0.1", "--port", str(port), "--db", sqlite_url]
    proc = subprocess.Popen(
        [sys.executable, "-m", "longtask", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"longtask serve exited with {proc.returncode}:\n{out}{err}")
            try:
                if httpx.get(f"{base}/ok", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "longtask serve did not answer within 30 s"
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        assert TOKEN not in out + err, "the server printed a token"


def new_page(browser: Any, **kw: Any) -> Any:
    """A page that holds the token as the page keeps it once given (sessionStorage): with a
    token configured every read needs one (issue 41)."""
    page = browser.new_page(**kw)
    page.add_init_script(f"sessionStorage.setItem('longtask.token', {TOKEN!r})")
    return page


def set_token(page: Any, value: str) -> None:
    """Types a token as a person does: the page takes it when the field loses focus."""
    page.fill("#token", value)
    page.locator("#token").press("Tab")


def test_a_missing_thread_has_a_page_that_says_so(server: str, browser: Any) -> None:
    from playwright.sync_api import expect

    page = new_page(browser)
    response = page.goto(f"{server}/threads/nope")
    # with tokens the page's shell does not tell; the API it asks with the token does
    assert response is not None and response.status == 200
    expect(page.locator("#status")).to_have_text("no such thread", timeout=WAIT)
    expect(page.locator("#not-found")).to_be_visible()
    expect(page.locator("#live")).not_to_have_text("reconnecting…")


def test_approve_on_the_page_and_watch_the_thread_complete(
    sqlite_url: str, server: str, browser: Any
) -> None:
    from playwright.sync_api import expect

    task = load_task(TASK_REF)
    with Runner(sqlite_url) as runner:
        runner.start(task, {}, thread_id=THREAD)
        assert runner.status(THREAD).status == "waiting_external"

    page = new_page(browser, viewport={"width": 1100, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # The list of threads links to the thread's page.
    page.goto(f"{server}/")
    page.get_by_role("link", name=THREAD).click(timeout=WAIT)
    page.wait_for_url(f"{server}/threads/{THREAD}")
    status = page.locator("#status")
    expect(status).to_have_text("waiting_external", timeout=WAIT)
    expect(page.locator("#task")).to_have_text("weekly_report v1")
    expect(page.locator('li.step[data-step="parse"]')).to_contain_text("items 8/8")
    # The pause sign is drawn (an SVG): Debian's fonts have no glyph for U+23F8.
    expect(page.locator('li.step[data-step="ci"] .mark[data-state="waiting"] svg')).to_be_visible()
    # Marks the document: after a reload the mark would be gone.
    page.evaluate("window.__sameDocument = true")

    # The CI event comes from another process; the page shows the approval by itself.
    signal = run_cli("signal", THREAD, "ci", "--payload", '"passed"', db=sqlite_url)
    assert signal.returncode == 3, signal.stdout + signal.stderr
    expect(status).to_have_text("waiting_user", timeout=WAIT)
    plan = page.locator(f'.pending[data-step="{STEP}"] .plan')
    expect(plan).to_contain_text("s3://reports/weekly-2030-08.md")
    expect(plan.locator('dd[data-key="documents"]')).to_have_text("8")
    # The diff stat is a block of lines, not one escaped JSON string behind a scrollbar.
    diff = plan.locator('dd[data-key="diff"] pre.text')
    assert diff.inner_text().splitlines() == web_task.DIFF_STAT.splitlines()
    assert diff.evaluate("e => e.scrollWidth <= e.clientWidth")
    assert "\\n" not in plan.inner_text()
    with Runner(sqlite_url) as runner:
        [pending] = runner.pending(THREAD)
    expect(page.locator(".plan-hash")).to_have_text(pending.request["plan_hash"])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser-pending.png"), full_page=True)
    if os.environ.get("LT_UPDATE_DOCS_IMAGE"):
        shutil.copyfile(ARTIFACTS / "browser-pending.png", README_IMAGE)

    # A wrong token is refused on the page, and the thread still waits. A new token makes
    # the page read again, and the refusal it shows moves the buttons down: wait for it
    # before clicking, or the press and the release land on different elements (no click).
    set_token(page, "not-the-token")
    expect(page.locator("#load-error")).to_contain_text("invalid bearer token", timeout=WAIT)
    page.click(f'.pending[data-step="{STEP}"] button.ok')
    expect(page.locator("#message")).to_contain_text("invalid bearer token", timeout=WAIT)
    with Runner(sqlite_url) as runner:
        assert runner.status(THREAD).status == "waiting_user"

    set_token(page, TOKEN)
    expect(page.locator("#load-error")).to_have_text("", timeout=WAIT)
    page.fill(f'.pending[data-step="{STEP}"] textarea.comment', "numbers look right")
    page.click(f'.pending[data-step="{STEP}"] button.ok')
    expect(status).to_have_text("completed", timeout=WAIT)
    # These arrive only through the event stream, not from the approve response.
    expect(page.locator('#events li[data-kind="longtask.completed"]')).to_have_count(
        1, timeout=WAIT
    )
    expect(page.locator("#events li").first).to_contain_text("longtask.completed")
    # Stage events name their stage.
    expect(page.locator('#events li[data-kind="stage.completed"]').first).to_contain_text(
        "stage.completed stage publish"
    )
    expect(page.locator('li.step[data-step="publish"] .mark')).to_have_text("✓", timeout=WAIT)
    expect(page.locator("#progress")).to_contain_text("5/5 steps (100%)")
    expect(page.locator("#pending-section")).to_be_hidden()
    expect(page.locator("#live")).to_have_text("finished", timeout=WAIT)
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
    assert page.evaluate("sessionStorage.getItem('longtask.token')") == TOKEN
    # The finished thread lists its artifacts, each a download link.
    link = page.locator('#artifacts li[data-name="report.md"] a')
    expect(link).to_be_visible(timeout=WAIT)
    with page.expect_download() as download:
        link.click()
    assert Path(download.value.path()).read_text() == web_task.REPORT
    assert download.value.suggested_filename == "report.md"
    assert errors == []

    page.screenshot(path=str(ARTIFACTS / "browser-approval.png"), full_page=True)

    with Runner(sqlite_url) as runner:
        assert runner.status(THREAD).status == "completed"
        resolved = runner.events(THREAD, kinds=["approval.resolved"])
        assert [(e.data["outcome"], e.data["by"], e.data["comment"]) for e in resolved] == [
            ("approved", "alice", "numbers look right")
        ]
        assert resolved[0].data["plan_hash"] == pending.request["plan_hash"]
        assert runner.result(THREAD, "publish") == (
            "published s3://reports/weekly-2030-08.md (approved by alice)"
        )


def test_the_page_of_a_failed_thread_stops_listening_and_shows_its_artifacts(
    sqlite_url: str, server: str, browser: Any
) -> None:
    """Issue 29, point 3: `failed` is a final status on the page as on the server (one list):
    the page does not reopen the ended event stream again and again, and shows what the
    thread stored before it failed."""
    from playwright.sync_api import expect

    failed = run_cli("run", f"{HERE / 'web_task.py'}:broken", "--thread", "broken", db=sqlite_url)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    page = new_page(browser)
    opened: list[str] = []
    page.on("request", lambda r: opened.append(r.url) if "/stream" in r.url else None)
    page.goto(f"{server}/threads/broken")
    expect(page.locator("#status")).to_have_text("failed", timeout=WAIT)
    expect(page.locator("#live")).to_have_text("finished", timeout=WAIT)
    expect(page.locator('#artifacts li[data-name="draft.md"] a')).to_be_visible(timeout=WAIT)
    page.wait_for_timeout(3000)  # a reconnecting page would open the stream again meanwhile
    assert len(opened) == 1, opened
    expect(page.locator("#live")).to_have_text("finished")


def test_the_page_links_a_parent_and_its_sub_tasks(
    sqlite_url: str, server: str, browser: Any
) -> None:
    from playwright.sync_api import expect

    parent = "sub-page"
    ref = f"{HERE / 'subtask_crash_task.py'}:gated_parent"
    started = run_cli("run", ref, "--thread", parent, db=sqlite_url)
    assert started.returncode == 3, started.stdout + started.stderr
    with Runner(sqlite_url) as runner:
        children = [r.child for r in runner.db.store.subtask_rows(parent)]
    page = new_page(browser)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{server}/threads/{parent}")
    fan = page.locator('li.step[data-step="fan"]')
    for child in children:
        expect(fan.get_by_role("link", name=child)).to_be_visible(timeout=WAIT)
    expect(fan.locator("ul.children .badge").first).to_have_text("waiting_user")
    fan.get_by_role("link", name=children[0]).click()
    page.wait_for_url(f"{server}/threads/{children[0]}")
    expect(page.locator("#tree")).to_contain_text(f"sub-task of {parent}", timeout=WAIT)
    page.get_by_role("link", name=parent).click()
    page.wait_for_url(f"{server}/threads/{parent}")
    assert not errors, errors
