"""The page's actions in a real browser against a real ``longtask serve`` (issue 29, item 11),
and the commands the page and the HTTP error bodies print, pasted into a shell (item 2).

A thread waiting for an outside event gets a form with its payload schema and an example
payload; a bad payload is refused and changes nothing, a good one continues the thread, whose
results (markup in them shown as text) appear when it completes, and the notice of what was
sent clears as it moves on. A failed step is retried, or skipped with a result; a waiting
thread is cancelled; the list of threads filters by status; nothing the page loads is a 404.

The server runs on a SQLite file in the test's directory (not the default database), so
every command it prints must carry ``--db``: each is pasted into a process in another
directory with no ``$LONGTASK_DB``, and must act on the server's database.

Needs /usr/bin/chromium and the ``playwright`` package, as ``test_browser.py`` (whose
fixtures these tests use).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import page_task  # the task module (tests/acceptance is on sys.path), for its constants
from test_browser import TOKEN, WAIT, browser, new_page, server  # noqa: F401  (fixtures)

from longtask import Runner
from longtask.runtime import load_task

HERE = Path(__file__).resolve().parent
DEPLOY = load_task(f"{HERE / 'page_task.py'}:deploy")
FLAKY = load_task(f"{HERE / 'page_task.py'}:flaky")
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: a backticked command in a message
COMMAND = re.compile(r"`(longtask [^`]+)`")
#: a word of a printed command that stands for something to fill in
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]+$")


def paste(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``command`` as a person pasting it into a new shell would: in another directory,
    without the server's environment's ``$LONGTASK_DB``."""
    words = shlex.split(command)
    assert words[0] == "longtask", command
    env = {k: v for k, v in os.environ.items() if k != "LONGTASK_DB"}
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "longtask", *words[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_page_signals_retries_skips_cancels_and_filters(
    sqlite_url: str,
    server: str,  # noqa: F811
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    flag = tmp_path / "upstream-is-up"
    with Runner(sqlite_url) as runner:
        for thread in ("deploy-form", "deploy-paste", "cancel-me"):
            runner.start(DEPLOY, {}, thread_id=thread)
        for thread in ("flaky-retry", "flaky-skip"):
            try:
                runner.start(FLAKY, {"flag": str(flag)}, thread_id=thread)
            except Exception as exc:
                assert "the upstream is down" in str(exc)
            assert runner.status(thread).status == "failed"

    page = new_page(browser, viewport={"width": 1100, "height": 900})
    errors: list[str] = []
    missing: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)

    # -- the list of threads, filtered by status ---------------------------------------
    page.goto(f"{server}/")
    rows = page.locator("#threads tr")
    expect(rows).to_have_count(5, timeout=WAIT)
    page.select_option("#status-filter", "failed")
    expect(rows).to_have_count(2, timeout=WAIT)
    expect(page.locator("#threads")).to_contain_text("flaky-retry")
    expect(page.locator("#threads")).not_to_contain_text("deploy-form")
    assert "status=failed" in page.url
    page.select_option("#status-filter", "waiting_external")
    expect(rows).to_have_count(3, timeout=WAIT)
    page.select_option("#status-filter", "completed")
    expect(page.locator("#empty")).to_have_text("no completed threads", timeout=WAIT)
    page.select_option("#status-filter", "")
    expect(rows).to_have_count(5, timeout=WAIT)

    # -- the signal form -----------------------------------------------------------------
    page.goto(f"{server}/threads/deploy-form")
    page.fill("#token", TOKEN)
    status = page.locator("#status")
    expect(status).to_have_text("waiting_external", timeout=WAIT)
    card = page.locator('.pending[data-step="deployed"]')
    expect(card.locator("pre.schema")).to_contain_text('"staging"')
    payload = card.locator("textarea.payload")
    assert json.loads(payload.input_value()) == {"env": "staging", "build": 0}
    send = card.locator("button.ok")
    with Runner(sqlite_url) as runner:
        before = len(runner.events("deploy-form"))
    payload.fill('{"env": "prod", ')
    send.click()
    expect(page.locator("#message")).to_contain_text("the payload is not JSON")
    payload.fill('{"env": "qa", "build": 1}')
    send.click()
    expect(page.locator("#message")).to_contain_text("does not match Deploy", timeout=WAIT)
    with Runner(sqlite_url) as runner:
        assert runner.status("deploy-form").status == "waiting_external"
        assert len(runner.events("deploy-form")) == before
    payload.fill('{"env": "prod", "build": 42}')
    send.click()
    expect(status).to_have_text("completed", timeout=WAIT)
    # The notice of what was sent is gone once the thread has moved on.
    expect(page.locator("#message")).to_have_text("", timeout=WAIT)
    # The final results: the last stage's, values as text (the markup is not a tag).
    results = page.locator("#results")
    expect(results.locator('dd[data-key="note"]')).to_have_text(page_task.MARKUP, timeout=WAIT)
    expect(results.locator('dd[data-key="build"]')).to_have_text("42")
    expect(results.locator('dd[data-key="deployed"]')).to_have_count(0)
    expect(page.locator("#injected")).to_have_count(0)
    expect(page.locator("#actions-section")).to_be_hidden()

    # -- the command the form shows, pasted into a shell ----------------------------------
    page.goto(f"{server}/threads/deploy-paste")
    expect(status).to_have_text("waiting_external", timeout=WAIT)
    card = page.locator('.pending[data-step="deployed"]')
    card.locator("textarea.payload").fill('{"env": "staging", "build": 7}')
    shown = card.locator(".signal-command").inner_text()
    assert f"--db {shlex.quote(sqlite_url)}" in shown, shown
    pasted = paste(shown, tmp_path / "elsewhere")
    assert pasted.returncode == 0, shown + "\n" + pasted.stdout + pasted.stderr
    expect(status).to_have_text("completed", timeout=WAIT)
    with Runner(sqlite_url) as runner:
        assert runner.result("deploy-paste", "announce")["build"] == 7

    # -- retry of a failed step -----------------------------------------------------------
    page.goto(f"{server}/threads/flaky-retry")
    expect(status).to_have_text("failed", timeout=WAIT)
    retry = page.locator("button.retry")
    expect(retry).to_have_text("Retry fetch")
    # The stream of the failed thread has ended: the page must listen again after Retry.
    expect(page.locator("#live")).to_have_text("finished", timeout=WAIT)
    flag.touch()
    retry.click()
    expect(status).to_have_text("completed", timeout=WAIT)
    expect(page.locator('#results dd[data-key="store"]')).to_have_text("stored fetched")
    # The page says how the retry went (issue 45: it gave no feedback when it failed again).
    expect(page.locator("#message")).to_have_text("the retry of fetch succeeded", timeout=WAIT)

    # -- skip of a failed step with a result --------------------------------------------
    flag.unlink()
    page.goto(f"{server}/threads/flaky-skip")
    expect(status).to_have_text("failed", timeout=WAIT)
    expect(page.locator("#live")).to_have_text("finished", timeout=WAIT)
    page.fill("textarea.skip-result", '"from the cache"')
    page.click("button.skip")
    expect(status).to_have_text("completed", timeout=WAIT)
    expect(page.locator('#results dd[data-key="store"]')).to_have_text("stored from the cache")

    # -- cancel ------------------------------------------------------------------------
    page.goto(f"{server}/threads/cancel-me")
    expect(status).to_have_text("waiting_external", timeout=WAIT)
    page.fill("input.cancel-reason", "wrong build")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button.cancel")
    expect(status).to_have_text("cancelled", timeout=WAIT)
    expect(page.locator("#actions-section")).to_be_hidden()

    with Runner(sqlite_url) as runner:
        [retried] = runner.events("flaky-retry", kinds=["manual.retry"])
        [skipped] = runner.events("flaky-skip", kinds=["manual.skip"])
        [cancelled] = runner.events("cancel-me", kinds=["manual.cancel"])
        assert [e.data["by"] for e in (retried, skipped, cancelled)] == ["alice"] * 3
        assert cancelled.data["reason"] == "wrong build"
        [resolved] = runner.events("deploy-form", kinds=["wait.resolved"])
        assert resolved.data == {"payload": {"env": "prod", "build": 42}, "by": "alice"}

    assert httpx.get(f"{server}/favicon.ico").status_code == 200
    assert missing == [], missing
    assert errors == []


def test_commands_in_error_bodies_run_against_the_servers_database(
    sqlite_url: str,
    server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    with Runner(sqlite_url) as runner:
        runner.start(DEPLOY, {}, thread_id="waits")
        runner.start(DEPLOY, {}, thread_id="done")
        runner.signal("done", "deployed", {"env": "prod", "build": 1})
        runner.start(DEPLOY, {}, thread_id="stopped")
        runner.cancel("stopped")

    texts: list[str] = []

    def refused(path: str, body: dict[str, Any], code: int) -> None:
        r = httpx.post(f"{server}{path}", json=body, headers=AUTH, timeout=30)
        assert r.status_code == code, r.text
        texts.append(r.json()["error"])

    # Nothing failed, so nothing to retry: each says to see `longtask status THREAD`.
    for thread in ("waits", "done", "stopped"):
        refused(f"/api/threads/{thread}/retry", {}, 409)
    commands = [c for text in texts for c in COMMAND.findall(text)]
    assert [c.split()[1] for c in commands].count("status") == 3, texts

    ran = 0
    for command in commands:
        words = command.split()
        if "--help" in words:
            continue  # help needs no database
        assert f"--db {shlex.quote(sqlite_url)}" in command, command
        if any(PLACEHOLDER.match(w) for w in words):
            continue  # stands for something to fill in: not pasteable as it is
        pasted = paste(command, tmp_path / "elsewhere")
        out = pasted.stdout + pasted.stderr
        assert "there is no longtask database" not in out, command + "\n" + out
        assert pasted.returncode in (0, 3), command + "\n" + out
        assert words[2] in out, command + "\n" + out  # it read the thread it names
        ran += 1
    assert ran == 3, commands
