"""Issue 45's papercuts of the web page, in a real browser against ``longtask serve``
(fixtures of test_browser.py: skipped without Chromium, except under CI): Retry says when
the step fails again, the payload box is as high as its example, and the thread list says
what a waiting thread waits for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import run_cli
from test_browser import TOKEN, WAIT, browser, new_page, server  # noqa: F401 (fixtures)

HERE = Path(__file__).resolve().parent
WEB = HERE / "web_task.py"


def test_retry_on_the_page_says_when_the_step_fails_again(
    sqlite_url: str,
    server: str,  # noqa: F811
    browser: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    failed = run_cli("run", f"{WEB}:broken", "--thread", "rb", db=sqlite_url)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    page = new_page(browser)
    page.goto(f"{server}/threads/rb")
    expect(page.locator("#status")).to_have_text("failed", timeout=WAIT)
    page.fill("#token", TOKEN)
    page.locator("button.retry").click()
    expect(page.locator("#message")).to_contain_text(
        "the retry of draft failed again: ValueError: the draft does not parse", timeout=WAIT
    )
    expect(page.locator("#message")).to_have_class("error")


def test_the_list_says_what_waits_and_the_payload_box_fits_its_example(
    sqlite_url: str,
    server: str,  # noqa: F811
    browser: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    paused = run_cli("run", f"{WEB}:task", "--thread", "wk", db=sqlite_url)
    assert paused.returncode == 3, paused.stdout + paused.stderr
    page = new_page(browser)
    page.goto(server)
    expect(page.locator("#threads tr", has_text="wk").locator(".waits")).to_have_text(
        "for event ci", timeout=WAIT
    )
    page.goto(f"{server}/threads/wk")
    box = page.locator("textarea.payload")
    expect(box).to_be_visible(timeout=WAIT)
    lines = box.input_value().count("\n") + 1
    assert int(box.get_attribute("rows") or 0) > lines, (lines, box.get_attribute("rows"))
    # and the box shows the whole example: no scrolling inside it
    assert box.evaluate("b => b.scrollHeight <= b.clientHeight")
