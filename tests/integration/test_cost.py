"""A thread's cost at a glance, on every backend: per-step usage in ``status`` (kept where
usage is charged, not read from the event log), ``ls`` with cost and age, the report
(Markdown and HTML) and its two charts.

The task has two agent steps against the scripted OpenAI server, a function step that
charges the budget itself and fails once before it succeeds, an approval and a side effect.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli
from fakes import FakeOpenAI, Reply, by_conversation
from serve_access import AdminClient

from longtask import (
    Budget,
    LongTask,
    Retry,
    Runner,
    Stage,
    StepContext,
    Transient,
    agent_step,
    approval,
    function_step,
)
from longtask.model import Prompt

SECRET = "sk-test-SECRET-cost-report-0b1e"
#: a step result and an input a careless report would paste into its HTML as markup
EVIL = "<script>alert('x')</script>"


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    script = by_conversation(
        {
            "Write about": [
                Reply.tool_calls([("lookup", {"topic": "durable"})], usage=(100, 20)),
                Reply.text("A draft about durable agents.", usage=(150, 30)),
            ],
            "Summarise": [Reply.text("Short summary.", usage=(40, 8))],
        }
    )
    server = FakeOpenAI(script).start()
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    yield server
    server.stop()


def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def costly_task(failures: list[int], posted: list[str]) -> LongTask:
    @function_step(retry=Retry(max_attempts=3, initial_wait=0, max_wait=0, jitter=False))
    def tally(ctx: StepContext) -> dict[str, Any]:
        ctx.charge(tokens=50, cost=0.01, tool_calls=1)
        if not failures:
            failures.append(1)
            raise Transient("the counter service blinked")
        return {"words": 5, "note": EVIL}

    @function_step
    def publish(ctx: StepContext) -> str:
        return ctx.effect("post", lambda text: posted.append(text) or "posted", "the draft")

    return LongTask(
        "costly",
        stages=[
            Stage(
                "draft",
                [
                    agent_step(
                        "writer",
                        prompt=Prompt(name="writer", template="Write about {inputs[topic]}."),
                        tools=[lookup],
                    ),
                    tally,
                ],
            ),
            Stage("review", [approval("signoff")]),
            Stage(
                "ship",
                [
                    publish,
                    agent_step("summary", prompt="Summarise {writer}.", after="publish"),
                ],
            ),
        ],
        budget=Budget(tokens=100_000, cost=5.0),
    )


def cheap_task() -> LongTask:
    return LongTask("cheap", stages=[Stage("only", [function_step(lambda ctx: 1, name="one")])])


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


def run_costly(runner: Runner, thread: str = "t-cost") -> str:
    failures: list[int] = []
    posted: list[str] = []
    task = costly_task(failures, posted)
    runner.start(task, {"topic": EVIL}, thread_id=thread)
    assert runner.status(thread).status == "waiting_user"
    runner.approve(thread, "signoff", by="alice", comment="ship it <b>now</b>", task=task)
    assert runner.status(thread).status == "completed"
    assert posted == ["the draft"] and failures == [1]
    return thread


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "img":
            self.images.append(dict(attrs).get("src") or "")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_status_usage_adds_up_to_the_events_and_the_budget(runner: Runner, llm: FakeOpenAI) -> None:
    thread = run_costly(runner)
    status = runner.status(thread)
    steps = {s.name: s for s in status.steps}
    calls = runner.events(thread, kinds=["model.call"])
    assert {e.step for e in calls} == {"writer", "summary"}
    for name in ("writer", "summary"):
        mine = [e.data for e in calls if e.step == name]
        usage = steps[name].usage
        assert usage is not None
        assert usage["model_calls"] == len(mine)
        assert usage["tokens"] == sum(d["usage"]["total"] for d in mine)
        assert usage["cost"] == pytest.approx(sum(d["cost"] for d in mine))
    writer, tally, signoff = (steps[n].usage for n in ("writer", "tally", "signoff"))
    assert writer is not None and tally is not None and signoff is not None
    assert (writer["tokens"], writer["model_calls"], writer["tool_calls"]) == (300, 2, 1)
    # ctx.charge of both attempts, and the attempt that failed
    assert (tally["tokens"], tally["cost"], tally["tool_calls"]) == (100, pytest.approx(0.02), 2)
    assert tally["attempts"] == 2 and tally["model_calls"] == 0
    # every step ran (an approval: the time it waited) and its times are recorded
    for s in status.steps:
        u = s.usage
        assert u is not None and u["started_at"] is not None, s.name
        assert u["finished_at"] is not None and u["wall_time"] >= 0
        assert u["finished_at"] >= u["started_at"]
        assert u["wall_time"] <= u["finished_at"] - u["started_at"] + 1e-6
    assert signoff["model_calls"] == 0 and signoff["attempts"] == 1

    total = status.usage
    budget = runner.budget(thread)
    assert total is not None and budget is not None
    assert total.tokens == budget.used["tokens"] == 300 + 100 + 48
    assert total.cost == pytest.approx(budget.used["cost"])
    assert total.tool_calls == budget.used["tool_calls"] == 3
    assert total.model_calls == 3
    assert sum(s.usage["tokens"] for s in status.steps if s.usage) == total.tokens
    assert sum(s.usage["cost"] for s in status.steps if s.usage) == pytest.approx(total.cost)
    assert total.limits["tokens"] == 100_000 and total.limits["tool_calls"] is None
    assert total.left["tokens"] == 100_000 - total.tokens
    assert total.left["cost"] == pytest.approx(5.0 - total.cost)
    assert total.wall_time > 0
    assert runner.usage(thread) == total  # finished: its wall time no longer grows
    bare = runner.status(thread, usage=False)
    assert bare.usage is None and all(s.usage is None for s in bare.steps)
    assert bare.model_dump(exclude={"usage", "steps"}) == status.model_dump(
        exclude={"usage", "steps"}
    )


def test_ls_lists_cost_and_age_and_sorts_by_cost(
    runner: Runner, llm: FakeOpenAI, db_url: str
) -> None:
    runner.start(cheap_task(), thread_id="t-cheap-old")
    costly = run_costly(runner)
    runner.start(cheap_task(), thread_id="t-cheap-new")
    by_cost = runner.threads_with_cost(sort="cost")
    assert by_cost[0].thread_id == costly
    assert by_cost[0].cost == pytest.approx(runner.budget(costly).used["cost"])  # type: ignore[union-attr]
    assert by_cost[0].tokens == 448 and by_cost[1].cost == 0
    by_age = [t.thread_id for t in runner.threads_with_cost(sort="age")]
    assert by_age == ["t-cheap-old", costly, "t-cheap-new"]
    updated = [t.thread_id for t in runner.threads_with_cost()]
    assert updated == [t.thread_id for t in runner.threads()]
    assert [t.thread_id for t in runner.threads_with_cost(sort="cost", limit=1)] == [costly]

    listed = run_cli("ls", "--sort", "cost", "--json", db=db_url)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert rows[0]["thread_id"] == costly and rows[0]["cost"] > 0 and rows[0]["tokens"] == 448
    assert {"age", "cost", "tokens", "tool_calls", "status", "updated_at"} <= set(rows[0])
    assert rows[0]["age"] >= rows[-1]["age"] - 60  # seconds, not a date
    text = run_cli("ls", "--sort", "cost", db=db_url)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert "cost" in lines[0] and "age" in lines[0]
    assert lines[1].split()[0] == costly
    bad = run_cli("ls", "--sort", "price", db=db_url)
    assert bad.returncode == 2 and "updated, cost, age" in bad.stderr


def test_status_json_and_text_show_usage(runner: Runner, llm: FakeOpenAI, db_url: str) -> None:
    thread = run_costly(runner)
    shown = run_cli("status", thread, "--json", db=db_url)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["usage"]["tokens"] == 448 and data["usage"]["model_calls"] == 3
    assert data["usage"]["left"]["tokens"] == 100_000 - 448
    steps = {s["name"]: s for s in data["steps"]}
    assert steps["writer"]["usage"]["tokens"] == 300
    assert steps["tally"]["usage"]["attempts"] == 2
    assert steps["signoff"]["usage"]["wall_time"] >= 0
    assert isinstance(steps["signoff"]["usage"]["started_at"], float)
    text = run_cli("status", thread, db=db_url)
    assert text.returncode == 0, text.stderr
    assert "total: wall time" in text.stdout and "448 tokens" in text.stdout
    assert "budget left: tokens 99552 of 100000" in text.stdout
    assert SECRET not in shown.stdout + text.stdout


def test_report_markdown_and_html(
    runner: Runner, llm: FakeOpenAI, tmp_path: Path, db_url: str
) -> None:
    thread = run_costly(runner)
    md = runner.report(thread, tmp_path / "out" / "report.md")
    text = md.read_text()
    for section in (
        "## Timeline",
        "## Cost over time",
        "## Steps",
        "## Approvals",
        "## Waits and signals",
        "## Side effects",
        "## Errors and retries",
    ):
        assert section in text, section
    assert "**status**: completed" in text and "costly v1" in text
    assert "alice" in text and "approved" in text and "ship it &lt;b&gt;now&lt;/b&gt;" in text
    assert "| post |" in text and "succeeded" in text
    assert "the counter service blinked" in text and "transient" in text
    assert "budget left" in text and "tokens 99552 of 100000" in text
    # the step rows: stage, step, kind, status, started, duration, attempts, ...
    rows = {
        cells[1]: cells
        for line in text.splitlines()
        if line.startswith("| ")
        and len(cells := [c.strip() for c in line.strip("|").split("|")]) == 12
    }
    assert rows["tally"][6] == "2" and rows["writer"][8] == "300"
    assert rows["signoff"][3] == "completed" and rows["signoff"][5].endswith("s")
    assert "<script>" not in text and "&lt;script&gt;" in text  # the inputs, escaped
    charts = sorted(p.name for p in (tmp_path / "out" / "report-files").iterdir())
    assert charts == ["cost.png", "timeline.png"]
    assert "](report-files/timeline.png)" in text
    assert (tmp_path / "out" / "report-files" / "cost.png").read_bytes()[:4] == b"\x89PNG"

    page = runner.report(thread, tmp_path / "report.html")
    document = page.read_text()
    parsed = Tags()
    parsed.feed(document)
    assert "script" not in parsed.tags  # EVIL stayed text
    assert any(EVIL in chunk for chunk in parsed.text)
    assert any("ship it <b>now</b>" in chunk for chunk in parsed.text)
    assert "b" not in parsed.tags
    assert len(parsed.images) == 2 and all(
        src.startswith("data:image/png;base64,") for src in parsed.images
    )
    for heading in ("Timeline", "Cost over time", "Steps", "Approvals", "Side effects"):
        assert f"<h2>{heading}</h2>" in document
    assert not (tmp_path / "report-files").exists()  # HTML is one file
    assert SECRET not in text + document

    # the CLI: the format from the extension, or --format
    out = run_cli("report", thread, "-o", str(tmp_path / "cli.html"), db=db_url)
    assert out.returncode == 0, out.stderr
    assert "wrote" in out.stdout and (tmp_path / "cli.html").read_text().startswith("<!DOCTYPE")
    out = run_cli(
        "report",
        thread,
        "-o",
        str(tmp_path / "plain.txt"),
        "--format",
        "md",
        "--no-charts",
        db=db_url,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "plain.txt").read_text().startswith("# Report: costly")
    assert not (tmp_path / "plain-files").exists()
    out = run_cli("report", thread, "-o", str(tmp_path / "report.pdf"), db=db_url)
    assert out.returncode == 1 and "name a .md or .html file" in out.stderr
    out = run_cli("report", "no-such-thread", db=db_url, cwd=tmp_path)
    assert out.returncode == 1 and "no-such-thread" in out.stderr
    out = run_cli("report", thread, db=db_url, cwd=tmp_path)
    assert out.returncode == 0 and (tmp_path / "t-cost-report.md").is_file()


def test_report_without_matplotlib_says_how_to_get_charts(
    runner: Runner, llm: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = run_costly(runner)
    # matplotlib cannot be imported (as where the notebook extra is not installed)
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    text = runner.report(thread, tmp_path / "r.md").read_text()
    assert "No charts" in text and "langgraph-longtask[notebook]" in text
    assert "## Steps" in text and "alice" in text
    assert not (tmp_path / "r-files").exists()


def test_timeline_and_cost_charts_render(runner: Runner, llm: FakeOpenAI) -> None:
    from longtask.ops._plots import png, spans

    thread = run_costly(runner)
    figure = runner.timeline(thread)
    axes = figure.axes[0]
    assert [t.get_text() for t in axes.get_yticklabels()] == [
        "writer",
        "tally",
        "signoff",
        "publish",
        "summary",
    ]
    bars = [p for p in axes.patches if p.get_gid() == "step"]
    events = runner.events(thread)
    assert len(bars) == len(spans(events))  # a bar per run and per pause
    # the tally's failed attempt ended in a retry in the same run: one bar; a pause: two
    assert len(bars) == 6
    shades = [p for p in axes.patches if p.get_gid() == "wait"]
    assert len(shades) == 1  # the approval
    assert {t.get_text() for t in axes.texts} == {"draft", "review", "ship"}
    assert png(figure)[:8] == b"\x89PNG\r\n\x1a\n"

    chart = runner.cost_chart(thread)
    main = chart.axes[0]
    (cost_line,) = [line for line in main.get_lines() if line.get_gid() == "cost"]
    (tokens_line,) = [line for line in chart.axes[1].get_lines() if line.get_gid() == "tokens"]
    calls = [e.data for e in events if e.kind == "model.call"]
    assert cost_line.get_ydata()[-1] == pytest.approx(sum(d["cost"] for d in calls))
    assert tokens_line.get_ydata()[-1] == 348  # model calls only (not ctx.charge)
    assert len([p for p in main.patches if p.get_gid() == "wait"]) == 1
    assert png(chart)[:8] == b"\x89PNG\r\n\x1a\n"

    # Issue 45: both time axes start at the thread's start and end together, one above the
    # other (the same horizontal extent on the page), and no stage name sits over a bar.
    assert axes.get_xlim() == main.get_xlim() and axes.get_xlim()[0] == 0
    box, cost_box = axes.get_position(), main.get_position()
    assert (box.x0, box.x1) == pytest.approx((cost_box.x0, cost_box.x1))
    for text in axes.texts:
        x, _ = text.get_position()
        assert x >= 1 and text.get_ha() == "left", text  # in the right margin, outside


def test_serve_shows_usage_lists_cost_and_serves_the_report(
    runner: Runner, llm: FakeOpenAI
) -> None:

    from longtask.serve import create_app

    costly = run_costly(runner)
    runner.start(cheap_task(), thread_id="t-cheap")
    with AdminClient(create_app(runner, {"tok": "alice"}, poll=0.02)) as client:
        body = client.get(f"/api/threads/{costly}").json()
        assert body["usage"]["tokens"] == 448 and body["usage"]["model_calls"] == 3
        assert {s["name"]: s["usage"]["tokens"] for s in body["steps"]}["writer"] == 300
        listed = client.get("/api/threads", params={"sort": "cost"}).json()
        assert [t["thread_id"] for t in listed] == [costly, "t-cheap"]
        assert listed[0]["cost"] > 0 and listed[1]["cost"] == 0 and listed[0]["age"] >= 0
        assert client.get("/api/threads", params={"sort": "price"}).status_code == 400

        report = client.get(f"/api/threads/{costly}/report")
        assert report.status_code == 200
        assert report.headers["content-type"].startswith("text/html")
        assert 't-cost-report.html"' in report.headers["content-disposition"]
        parsed = Tags()
        parsed.feed(report.text)
        assert "script" not in parsed.tags and len(parsed.images) == 2
        assert "alice" in report.text and "<h2>Side effects</h2>" in report.text
        md = client.get(f"/api/threads/{costly}/report", params={"format": "md"})
        assert md.status_code == 200 and md.text.startswith("# Report: costly")
        assert "](data:image/png;base64," in md.text
        assert client.get("/api/threads/nope/report").status_code == 404
        bad = client.get(f"/api/threads/{costly}/report", params={"format": "pdf"})
        assert bad.status_code == 400

        page = client.get(f"/threads/{costly}", headers={"Accept": "text/html"}).text
        assert 'id="cost-section"' in page and "renderUsage" in page
        index = client.get("/", headers={"Accept": "text/html"}).text
        assert "?sort=cost" in index and "money(t.cost)" in index


def test_a_cancelled_threads_total_wall_time_covers_its_steps(db_url: str, tmp_path: Path) -> None:
    """A step cut off mid-run (its process killed, then the thread cancelled) is timed to
    the thread's end, as the thread's total is: it went on counting up to every read, past
    the total (issue 29, item 9)."""
    import os
    import signal
    import subprocess
    import time

    from longtask import Runner

    ref = f"{Path(__file__).resolve().parent / 'prune_task.py'}:task"
    marker, gate = tmp_path / "blocking", tmp_path / "never"
    env = {**os.environ, "LT_PRUNE_MARKER": str(marker), "LT_PRUNE_GATE": str(gate)}
    args = ["run", ref, "--thread", "cut", "--input", '{"block": true}', "--db", db_url]
    proc = subprocess.Popen([sys.executable, "-m", "longtask", *args], env=env)
    try:
        deadline = time.monotonic() + 90
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists()
        with Runner(db_url) as r:  # the step's start is stored a moment after it starts
            while not any(
                e.step == "gate" for e in r.db.store.events("cut", kinds=["step.started"])
            ):
                assert time.monotonic() < deadline, "the gate step's start was never stored"
                time.sleep(0.05)
            while not any(s.name == "gate" and s.usage for s in r.status("cut").steps):
                assert time.monotonic() < deadline, "the gate step's run was never stored"
                time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with Runner(db_url) as r:
        assert r.cancel("cut", reason="cut off")
        time.sleep(1.5)  # a step timed to now would now be past the thread's total
        st = r.status("cut")
        assert st.status == "cancelled"
        rows = {s.name: s.usage for s in st.steps if s.usage}
        assert rows.get("gate"), st.steps  # the step cut off has its running time
        total = st.usage.wall_time if st.usage else 0.0
        for name, u in rows.items():
            assert u["wall_time"] <= total + 1e-6, (name, u, total)
