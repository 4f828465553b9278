"""The page's card of a tool call cut off mid-call, in a real browser against ``longtask
serve`` (fixtures of test_browser.py: skipped without Chromium, except under CI).

Three threads of the unchanged booking agent (``tests/integration/booking_task.py``, the
model at the scripted server) each had their booking cut off after the airline's commit and
wait for a person. Each card shows the call: its name, arguments, tool_call_id and key, a
result box prefilled with the shape of the tool's answer, and the shell command that does
the same. A result that is no JSON is refused on the page and changes nothing; "It
happened" records the result given (one booking, the model told it), "It did not happen"
calls the tool again (a second booking), "It failed" fails the step with the reason given."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeOpenAI, Reply, by_turn
from test_browser import (  # noqa: F401 (fixtures)
    ARTIFACTS,
    TOKEN,
    WAIT,
    browser,
    new_page,
    server,
)

from longtask import Runner
from longtask.runtime import load_task

ROOT = Path(__file__).resolve().parents[2]
REF = f"{ROOT / 'tests' / 'integration' / 'booking_task.py'}:task"


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeOpenAI]:
    """The model and the airline, for this process and the server it starts after."""
    model = FakeOpenAI(
        by_turn([Reply.tool_calls([("book_flight", {"flight": "LX8"})]), Reply.text("booked")])
    ).start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-page-effect")
    monkeypatch.setenv("OPENAI_BASE_URL", model.base_url)
    monkeypatch.setenv("LT_AIRLINE_DB", str(tmp_path / "airline.db"))
    monkeypatch.setenv("LT_CRASH_MARKER", str(tmp_path / "crashed"))
    monkeypatch.setenv("LT_CRASH", "raise")
    yield model
    model.stop()


@pytest.fixture
def served(llm: FakeOpenAI, server: str) -> str:  # noqa: F811
    """``longtask serve`` started once the model and the airline are in its environment."""
    return server


def _bookings() -> list[tuple[str, str]]:
    with sqlite3.connect(os.environ["LT_AIRLINE_DB"]) as conn:
        rows = conn.execute("SELECT flight, tool_call_id FROM bookings").fetchall()
    return [(str(f), str(t)) for f, t in rows]


def _cut_off(runner: Runner, thread: str) -> None:
    """A thread of alice's whose booking was cut off after the airline's commit, paused."""
    Path(os.environ["LT_CRASH_MARKER"]).unlink(missing_ok=True)  # this thread's crash
    task = load_task(REF)
    with pytest.raises(KeyboardInterrupt):
        runner.start(task, thread_id=thread, task_ref=REF, by="alice")
    runner.resume(thread, task=task)
    assert runner.status(thread, usage=False).status == "waiting_user"


def test_the_page_shows_the_cut_off_call_and_settles_it_each_way(
    sqlite_url: str,
    llm: FakeOpenAI,
    served: str,
    browser: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    with Runner(sqlite_url) as runner:
        for thread in ("trip-happened", "trip-again", "trip-failed"):
            _cut_off(runner, thread)
        keys = {t: runner.effects(t)[0].key for t in ("trip-happened", "trip-again")}
    ids = [tool_call_id for _, tool_call_id in _bookings()]
    assert len(ids) == 3

    page = new_page(browser, viewport={"width": 1100, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # -- it happened: the call as it was made, and its result recorded -------------------
    page.goto(f"{served}/threads/trip-happened")
    card = page.locator(".pending.effect")
    expect(card.locator("h3")).to_have_text("Call cut off: tool:book_flight in agent", timeout=WAIT)
    expect(card.locator("dd.effect-name")).to_have_text("tool:book_flight")
    expect(card.locator('dd.effect-args dd[data-key="flight"]')).to_have_text("LX8")
    expect(card.locator("dd.effect-tool-call-id")).to_have_text(ids[0])
    expect(card.locator("dd.effect-key")).to_have_text(keys["trip-happened"])
    box = card.locator("textarea.effect-result")
    assert json.loads(box.input_value()) == {"content": "...", "status": "success"}
    shell = card.locator("code.effect-command")
    expect(shell).to_contain_text(f"longtask effects resolve trip-happened {keys['trip-happened']}")
    expect(shell).to_contain_text("--db")  # the server's database, not the default one
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "browser-effect.png"), full_page=True)

    box.fill('{"content": "booked LX8 as #1",')
    card.locator("button.happened").click()
    expect(page.locator("#message")).to_contain_text("the result is not JSON")
    with Runner(sqlite_url) as runner:
        assert runner.status("trip-happened", usage=False).status == "waiting_user"
    box.fill('{"content": "booked LX8 as #1", "status": "success"}')
    expect(shell).to_contain_text('"content":"booked LX8 as #1"')
    card.locator("button.happened").click()
    expect(page.locator("#status")).to_have_text("completed", timeout=WAIT)
    expect(page.locator("#pending-section")).to_be_hidden()
    tool = [m["content"] for m in llm.requests[-1].messages if m.get("role") == "tool"]
    assert tool == ["booked LX8 as #1"]

    # -- it did not happen: called again ----------------------------------------------------
    page.goto(f"{served}/threads/trip-again")
    card = page.locator(".pending.effect")
    expect(card.locator("dd.effect-tool-call-id")).to_have_text(ids[1], timeout=WAIT)
    card.locator("button.retry-call").click()
    expect(page.locator("#status")).to_have_text("completed", timeout=WAIT)

    # -- it failed: the step fails, with the reason ----------------------------------------
    page.goto(f"{served}/threads/trip-failed")
    card = page.locator(".pending.effect")
    expect(card.locator("dd.effect-tool-call-id")).to_have_text(ids[2], timeout=WAIT)
    card.locator("input.effect-reason").fill("the airline has no such booking")
    card.locator("button.failed").click()
    expect(page.locator("#status")).to_have_text("failed", timeout=WAIT)
    expect(page.locator("#error")).to_contain_text("the airline has no such booking")
    assert errors == []

    # one booking each, and one more for the call made again
    assert [t for _, t in _bookings()] == [ids[0], ids[1], ids[2], ids[1]]
    with Runner(sqlite_url) as runner:
        settled = {
            t: [
                (e.data["outcome"], e.data["by"])
                for e in runner.events(t, kinds=["manual.resolve"])
            ]
            for t in ("trip-happened", "trip-again", "trip-failed")
        }
    assert settled == {
        "trip-happened": [("succeeded", "alice")],
        "trip-again": [("retry", "alice")],
        "trip-failed": [("failed", "alice")],
    }
