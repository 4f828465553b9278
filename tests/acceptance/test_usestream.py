"""A chat page of our own on LangGraph's React hook ``useStream`` (the hook Agent Chat UI and
Studio are built on), in headless Chromium, against a real ``longtask serve`` process, on
SQLite and PostgreSQL.

The page (``tests/usestream/page.jsx``) is built with esbuild from the npm registry's
``@langchain/langgraph-sdk``, React and esbuild, installed with ``npm ci`` from the committed
``package-lock.json`` into a cache outside the repository (keyed by the lock's hash, so a
rerun installs nothing), and served from its own port on 127.0.0.1 (a cross-origin page, as
Agent Chat UI is). The assistant's task has an agent step (the real ``ChatOpenAI`` client to
the scripted OpenAI-compatible server) and an approval:

- a chat message sent from the page (with an id of its own, as Agent Chat UI sends) starts
  the thread and stays in the thread's messages as sent; the agent's messages stream into
  ``stream.messages`` while the run goes on (the agent's second model call is held until the
  page has shown its first message and the tool's answer);
- the approval shows in ``stream.interrupt``; a reload of the paused thread (its id in the
  URL) shows the conversation and the interrupt again;
- ``submit(undefined, {command: {resume: ...}})`` from the page approves it (with
  fetchStateHistory, from the head's checkpoint, as Agent Chat UI's useStream sends), and the
  page shows the thread's final values.

The same page also chats with a plain LangGraph graph served as it is
(``usestream_graph.py``: a ReAct loop and its own ``interrupt()``, no longtask in it).

Needs /usr/bin/chromium (Debian package ``chromium``), the ``playwright`` package and npm
with the registry: without them the test is skipped, except when ``CI`` is set, where it
fails.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chat_task  # the task module (tests/acceptance is on sys.path), for its constants
import httpx
import pytest
from conftest import ROOT
from fakes import FakeOpenAI, Reply, Request

from longtask import Runner

HERE = Path(__file__).resolve().parent
PAGE_SRC = ROOT / "tests" / "usestream"
TASK_REF = f"{HERE / 'chat_task.py'}:task"
#: what serve offers, by the test's parameter: (task reference, assistant)
SERVED = {
    "task": (TASK_REF, chat_task.task.name),
    "graph": (f"{HERE / 'usestream_graph.py'}:graph#chat_graph", "chat_graph"),
}
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "tests" / "artifacts"
# Flags for a machine with no GPU, no sandbox and no network beyond 127.0.0.1.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "tok-alice-usestream"
KEY = "sk-test-usestream-5e1b"
QUESTION = f"What is the weather in {chat_task.CITY} today?"
ANSWER = f"Today it is {chat_task.FORECAST}."
WAIT = 30_000  # ms: how long the page may take to show a change


def _need(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: the useStream browser test must run)")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "longtask-tests"


def _install(npm: str) -> Path:
    """``npm ci`` of tests/usestream into the cache, once per lock file: its directory."""
    lock = (PAGE_SRC / "package-lock.json").read_bytes()
    digest = hashlib.sha256(lock + (PAGE_SRC / "package.json").read_bytes()).hexdigest()[:16]
    root = _cache_root()
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"usestream-{digest}"
    # Two pytest-xdist workers may both get here: one installs, the other waits for it.
    with open(root / "usestream.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if (target / "node_modules" / ".bin" / "esbuild").exists():
            return target
        work = root / f"usestream-{digest}.partial"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(PAGE_SRC / name, work / name)
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            _need(f"npm ci of {PAGE_SRC} failed:\n{done.stdout}{done.stderr}")
        shutil.rmtree(target, ignore_errors=True)
        work.rename(target)
        return target


@pytest.fixture(scope="session")
def page_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built page: index.html and page.js (React, the SDK and page.jsx, bundled)."""
    npm = shutil.which("npm")
    if npm is None:
        _need("npm is missing; install Node.js and npm (Debian: `apt-get install npm`)")
        raise AssertionError  # unreachable: _need skips or fails
    modules = _install(npm)
    out = tmp_path_factory.mktemp("usestream-page")
    # esbuild resolves imports from the source's directory: build a copy beside node_modules
    # (one per process: pytest-xdist workers share the directory).
    source = modules / f"page-{os.getpid()}.jsx"
    shutil.copyfile(PAGE_SRC / "page.jsx", source)
    try:
        built = subprocess.run(
            [
                str(modules / "node_modules" / ".bin" / "esbuild"),
                str(source),
                "--bundle",
                "--format=esm",
                "--jsx=automatic",
                '--define:process.env.NODE_ENV="production"',
                f"--outfile={out / 'page.js'}",
                "--log-level=error",
            ],
            cwd=modules,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        source.unlink()
    assert built.returncode == 0, built.stdout + built.stderr
    shutil.copyfile(PAGE_SRC / "index.html", out / "index.html")
    return out


@pytest.fixture
def site(page_dir: Path) -> Iterator[str]:
    """The page, served from its own port on 127.0.0.1 (another origin than serve's)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(page_dir))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        _need(f"{CHROMIUM} is missing; install it with `apt-get install chromium`")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need("the playwright package is not installed")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield chromium
        finally:
            chromium.close()


class Gate:
    """Holds the agent's second model call until the test has seen the first one's
    messages on the page (so "they streamed" does not depend on how fast anything is)."""

    def __init__(self) -> None:
        self.open = threading.Event()

    def script(self, request: Request) -> Reply:
        if request.turn == 0:
            return Reply.tool_calls([("weather", {"city": chat_task.CITY})])
        if request.turn == 1:
            assert self.open.wait(120), "the test never opened the gate"
            return Reply.text(ANSWER)
        raise LookupError(f"no scripted reply for turn {request.turn}")


@pytest.fixture
def model() -> Iterator[tuple[FakeOpenAI, Gate]]:
    gate = Gate()
    with FakeOpenAI(gate.script) as server:
        try:
            yield server, gate
        finally:
            gate.open.set()


@pytest.fixture
def served(request: pytest.FixtureRequest) -> str:
    """What serve offers: ``task`` (chat_task's LongTask) or ``graph`` (a plain graph)."""
    return str(getattr(request, "param", "task"))


@pytest.fixture
def serve(db_url: str, model: tuple[FakeOpenAI, Gate], served: str) -> Iterator[str]:
    """A ``longtask serve`` process offering chat_task (or the plain graph), for the model
    server; its URL."""
    fake, _ = model
    port = _free_port()
    env = {
        **os.environ,
        "LONGTASK_API_TOKENS": f"alice={TOKEN}",
        "OPENAI_API_KEY": KEY,
        "OPENAI_BASE_URL": fake.base_url,
    }
    env.pop("LONGTASK_API_TOKEN", None)
    env.pop("LONGTASK_CORS_ORIGINS", None)  # the default: loopback pages may call it
    args = ["serve", "--host", "127.0.0.1", "--port", str(port), "--db", db_url]
    proc = subprocess.Popen(
        [sys.executable, "-m", "longtask", *args, "--task", SERVED[served][0]],
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
        (ARTIFACTS / "usestream-serve.log").parent.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "usestream-serve.log").write_text(out + err)
        assert TOKEN not in out + err, "the server printed a token"
        assert KEY not in out + err, "the server printed the model key"


class Watch:
    """What went wrong on the page, for the failure messages (page errors, console errors,
    answers of serve that were not 2xx), and every exchange with serve, written to
    tests/artifacts/usestream-network.jsonl (request and answer bodies, streams included)."""

    def __init__(self, page: Any, api: str) -> None:
        self.errors: list[str] = []
        self.bad: list[str] = []
        self.exchanges: list[dict[str, Any]] = []
        self.log = ARTIFACTS / "usestream-network.jsonl"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.log.write_text("")
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on(
            "console",
            lambda msg: self.errors.append(f"console: {msg.text}") if msg.type == "error" else None,
        )

        def answered(response: Any) -> None:
            if not response.url.startswith(api):
                return
            request = response.request
            try:
                body = response.text()
            except Exception as exc:  # a preflight or an aborted stream has no body
                body = f"<no body: {exc}>"
            path = response.url[len(api) :]
            exchange = {
                "method": request.method,
                "path": path,
                "request": request.post_data,
                "status": response.status,
                "response": body,
            }
            self.exchanges.append(exchange)
            with self.log.open("a") as f:
                f.write(json.dumps(exchange) + "\n")
            if response.status >= 400:
                self.bad.append(
                    f"{request.method} {path} {request.post_data or ''}"
                    f" -> {response.status} {body[:500]}"
                )

        page.on("response", answered)

    def __str__(self) -> str:
        return "\n".join(["page errors:", *self.errors, "serve answered:", *self.bad])

    def streams(self) -> list[list[tuple[str, Any]]]:
        """The parts of each run stream the page read, (event, data) in order."""
        found = []
        for exchange in self.exchanges:
            if exchange["method"] == "POST" and exchange["path"].endswith("/runs/stream"):
                parts = []
                for block in exchange["response"].split("\n\n"):
                    fields = dict(
                        line.split(": ", 1) for line in block.splitlines() if ": " in line
                    )
                    if "event" in fields:
                        parts.append((fields["event"], json.loads(fields.get("data", "null"))))
                found.append(parts)
        return found


def _stream_problems(parts: list[tuple[str, Any]], interrupt_id: str | None) -> list[str]:
    """How a run's stream differs from LangGraph's server: the values end with the interrupt
    (which useStream takes stream.interrupt from, when it reads no history after the run),
    and each agent message comes (as a messages part) before the values that hold it."""
    problems = []
    values = [data for event, data in parts if event == "values"]
    streamed = [i.get("id") for v in values for i in v.get("__interrupt__") or []]
    if interrupt_id is not None and interrupt_id not in streamed:
        problems.append(f"no __interrupt__ {interrupt_id} in the values stream: {values[-1:]}")
    sent: set[str] = set()
    for event, data in parts:
        if event == "messages":
            sent.add(data[0].get("id"))
        elif event == "values":
            for m in data.get("messages") or []:
                if m.get("type") != "human" and m.get("id") not in sent:
                    problems.append(f"values hold {m.get('type')} message {m.get('id')} before it")
                    sent.add(m.get("id"))  # once is enough
    return problems


def _view(page: Any) -> dict[str, Any]:
    """The page's messages (type, text, tool calls) and interrupt, as the hook gave them."""
    messages = page.locator("#messages li.message")
    found = []
    for i in range(messages.count()):
        item = messages.nth(i)
        calls = item.locator(".tool-call")
        found.append(
            {
                "type": item.get_attribute("data-type"),
                "id": item.get_attribute("data-id"),
                "text": item.locator(".text").inner_text(),
                "tool_calls": [
                    calls.nth(j).get_attribute("data-name") for j in range(calls.count())
                ],
            }
        )
    box = page.locator("#interrupt .value")
    interrupt = json.loads(box.inner_text()) if box.count() else None
    interrupt_id = page.locator("#interrupt").get_attribute("data-id") if box.count() else None
    return {"messages": found, "interrupt": interrupt, "interrupt_id": interrupt_id}


def _conversation(view: dict[str, Any]) -> list[tuple[str | None, str]]:
    return [(m["type"], m["text"]) for m in view["messages"]]


EXPECTED = [
    ("human", QUESTION),
    ("ai", ""),  # the tool call
    ("tool", chat_task.FORECAST),
    ("ai", ANSWER),
]


# The hook's default reads no history after a run (stream.interrupt comes from the stream);
# Agent Chat UI sets fetchStateHistory, so the hook reads the thread's history after each run.
@pytest.mark.parametrize(
    ("served", "history"),
    [("task", False), ("task", True), ("graph", True)],
    ids=["default", "fetchStateHistory", "plain-graph"],
    indirect=["served"],
)
def test_chat_on_a_usestream_page_streams_pauses_reloads_and_is_approved(
    db_url: str,
    serve: str,
    site: str,
    browser: Any,
    model: tuple[FakeOpenAI, Gate],
    served: str,
    history: bool,
) -> None:
    from playwright.sync_api import expect

    fake, gate = model
    page = browser.new_page(viewport={"width": 1000, "height": 900})
    watch = Watch(page, serve)
    config = {
        "apiUrl": serve,
        "apiKey": TOKEN,
        "assistantId": SERVED[served][1],
        "history": history,
    }
    # Before the page's own script, on every load (the reload too).
    page.add_init_script(f"window.LT = {json.dumps(config)};")
    page.goto(f"{site}/index.html")
    app = page.locator("#app")
    expect(app).to_have_attribute("data-loading", "false", timeout=WAIT)

    # A chat message starts a thread; its id goes into the URL.
    page.fill("#input", QUESTION)
    page.click("#send")
    expect(app).to_have_attribute("data-thread", re.compile(".+"), timeout=WAIT)
    thread_id = app.get_attribute("data-thread")
    assert thread_id

    # The agent's first model call and its tool's answer stream in while the second model
    # call is held: the run is still going on.
    human = page.locator('li.message[data-type="human"]')
    tool = page.locator('li.message[data-type="tool"]')
    try:
        expect(human).to_have_text(QUESTION, timeout=WAIT)
        expect(page.locator('.tool-call[data-name="weather"]')).to_have_count(1, timeout=WAIT)
        expect(tool).to_contain_text(chat_task.FORECAST, timeout=WAIT)
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "usestream-streaming.png"), full_page=True)
    assert app.get_attribute("data-loading") == "true", watch
    deadline = time.monotonic() + 30
    while [r.turn for r in fake.requests] != [0, 1]:
        assert time.monotonic() < deadline, f"no second model call: {fake.requests}"
        time.sleep(0.05)
    gate.open.set()

    # The answer arrives and the thread pauses at the approval: stream.interrupt shows it.
    expect(page.locator("#interrupt")).to_be_visible(timeout=WAIT)
    expect(app).to_have_attribute("data-loading", "false", timeout=WAIT)
    page.screenshot(path=str(ARTIFACTS / "usestream-interrupt.png"), full_page=True)
    paused = _view(page)
    problems = []
    if _conversation(paused) != EXPECTED:
        problems.append(f"stream.messages at the pause: {_conversation(paused)}")
    sent = page.evaluate("window.__sent")
    if [m["id"] for m in paused["messages"][:1]] != sent:
        problems.append(f"the chat message is not kept as sent (id {sent}): {paused['messages']}")
    [first] = watch.streams()
    problems += _stream_problems(first, paused["interrupt_id"])
    assert not problems, "\n".join([*problems, str(watch)])
    assert paused["messages"][1]["tool_calls"] == ["weather"]
    assert paused["interrupt"]["plan"] == {"answer": ANSWER}, paused["interrupt"]
    assert paused["interrupt_id"]
    assert paused["interrupt"]["approvers"] == ["alice"]
    assert f"threadId={thread_id}" in page.url
    # The hook showed the agent's messages while the run was loading, before the pause.
    renders = page.evaluate("window.__renders")
    streamed = [
        r
        for r in renders
        if r["loading"]
        and r["interrupt"] is None
        and any(m["type"] == "tool" for m in r["messages"])
    ]
    assert streamed, renders
    with Runner(db_url) as runner:
        assert runner.status(thread_id).status == "waiting_user"

    # A reload of the paused thread shows the conversation and the interrupt again.
    page.reload()
    expect(page.locator("#interrupt")).to_be_visible(timeout=WAIT)
    expect(page.locator("#messages li.message")).to_have_count(len(EXPECTED), timeout=WAIT)
    reloaded = _view(page)
    assert reloaded == paused, f"{reloaded}\n{watch}"

    # Approved from the page: submit(undefined, {command: {resume: ...}}).
    expect(page.locator("#approve")).to_be_enabled(timeout=WAIT)
    page.click("#approve")
    # the LongTask's report names the approver; the plain graph's, the comment
    report = f"sent: {ANSWER} ({'approved by alice' if served == 'task' else 'send it'})"
    try:
        expect(page.locator("#values")).to_contain_text(report, timeout=WAIT)
    except AssertionError as exc:
        raise AssertionError(f"the approval did not go through:\n{watch}") from exc
    expect(page.locator("#interrupt")).to_have_count(0, timeout=WAIT)
    expect(app).to_have_attribute("data-loading", "false", timeout=WAIT)
    page.screenshot(path=str(ARTIFACTS / "usestream-completed.png"), full_page=True)
    done = _view(page)
    assert _conversation(done)[: len(EXPECTED)] == EXPECTED, f"{done}\n{watch}"
    values = json.loads(page.locator("#values").inner_text())
    assert values["report"] == report, values
    assert page.locator("#error").inner_text() == "", watch
    assert page.evaluate("window.__errors") == [], watch
    assert watch.errors == [], watch
    assert watch.bad == [], watch

    with Runner(db_url) as runner:
        assert runner.status(thread_id).status == "completed"
        if served == "task":
            resolved = runner.events(thread_id, kinds=["approval.resolved"])
            assert [(e.data["outcome"], e.data["by"], e.data["comment"]) for e in resolved] == [
                ("approved", "alice", "send it")
            ]
        else:  # the graph's own interrupt, answered: who answered is recorded too
            resolved = runner.events(thread_id, kinds=["interrupt.resolved"])
            assert [(e.data["by"], e.data["value"]) for e in resolved] == [
                ("alice", {"approved": True, "comment": "send it"})
            ]
    assert [r.turn for r in fake.requests] == [0, 1]
