"""Plain LangGraph apps served as they are (issue 40 item 2): ``lgapps/`` holds two apps laid
out as LangChain's templates lay them out (a ReAct agent with a tool, ChatOpenAI pointed at
the scripted OpenAI-compatible server; a graph with its own ``interrupt()``), named by a
``langgraph.json`` and left unmodified. ``longtask serve --config lgapps/langgraph.json`` (a
real process, both backends) serves them; the official Python SDK drives them and sees the
graphs' own state, interrupts and history; the thread is a longtask thread (events, costs,
status); and a ``serve`` killed (SIGKILL) in the middle of a run carries the run on after a
restart without running a finished node again (each node notes its body's start and end in a
file); the tool call the kill cut off, which carries no mark, pauses the thread until a
person says what became of it (here Agent Inbox's "accept": call it again). A second message
on a finished thread runs the graph again on its state, also across a kill in the second
run; ``resume --input`` (``runner.run_again``) does the same from the CLI.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import lgdiff_servers
import pytest
from fakes import FakeOpenAI, Reply, Request
from langgraph_sdk import get_client

HERE = Path(__file__).parent
APPS = HERE / "lgapps"
TOKEN = "tok-alice-plain"
QUESTION = "What is the weather in Paris?"


def _script(request: Request) -> Reply:
    """The agent searches once, then answers."""
    if request.turn == 0:
        return Reply.tool_calls([("search", {"query": "weather in Paris"})])
    return Reply.text("It is sunny in Paris.")


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(_script) as server:
        yield server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Serve:
    """``longtask serve --config lgapps/langgraph.json``, from another directory; restartable."""

    def __init__(self, db: str, env: dict[str, str], cwd: Path, *extra: str) -> None:
        self.db, self.cwd, self.extra = db, cwd, list(extra)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "LONGTASK_API_TOKENS": f"alice={TOKEN}", **env}
        self.env.pop("LONGTASK_API_TOKEN", None)
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        args = ["serve", "--port", str(self.port), "--db", self.db]
        args += ["--config", str(APPS / "langgraph.json"), *self.extra]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "longtask", *args],
            env=self.env,
            cwd=self.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"longtask serve exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/ok", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "longtask serve did not answer within 60 s"
            time.sleep(0.1)

    def output(self) -> str:
        assert self.proc is not None
        return self.proc.communicate()[0] or ""

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate()

    def stop(self) -> str:
        if self.proc is None or self.proc.poll() is not None:
            return ""
        self.proc.terminate()
        try:
            return self.proc.communicate(timeout=15)[0] or ""
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.communicate()[0] or ""


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    return tmp_path / "notes.txt"


def _serve(db: str, llm: FakeOpenAI, tmp_path: Path, notes: Path, *extra: str) -> Serve:
    where = tmp_path / "elsewhere"  # the config's paths are read beside it, not from here
    where.mkdir(exist_ok=True)
    env = {
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "sk-plain",
        "LGAPPS_NOTES": str(notes),
        "LGAPPS_HOLD": str(tmp_path / "hold"),
    }
    return Serve(db, env, where, *extra)


@pytest.fixture
def serve(db_url: str, llm: FakeOpenAI, tmp_path: Path, notes: Path) -> Iterator[Serve]:
    server = _serve(db_url, llm, tmp_path, notes)
    server.start()
    try:
        yield server
    finally:
        assert TOKEN not in server.stop(), "the server printed a token"


def _counts(notes: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in notes.read_text().splitlines() if notes.exists() else []:
        out[line] = out.get(line, 0) + 1
    return out


async def _until(check: Callable[[], Any], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def _cli(db: str, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "longtask", *args, "--db", db, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:  # one JSON object a line (events)
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_the_sdk_sees_a_served_react_agent_as_its_own_graph(
    serve: Serve, llm: FakeOpenAI, notes: Path
) -> None:
    async def drive() -> tuple[str, list[Any]]:
        lg = get_client(url=serve.url, api_key=TOKEN)
        found = await lg.assistants.search(graph_id="agent")
        assert [a["graph_id"] for a in found] == ["agent"]
        tid = (await lg.threads.create())["thread_id"]
        parts = [
            (p.event, p.data)
            async for p in lg.runs.stream(
                tid,
                "agent",
                input={"messages": [{"role": "user", "content": QUESTION}]},
                stream_mode=["values", "updates", "messages-tuple"],
            )
        ]
        state = await lg.threads.get_state(tid)
        # The graph's own state: its messages, no step results of longtask's.
        kinds = [m["type"] for m in state["values"]["messages"]]
        assert kinds == ["human", "ai", "tool", "ai"], state["values"]
        assert set(state["values"]) == {"messages"}
        assert state["values"]["messages"][-1]["content"] == "It is sunny in Paris."
        assert state["next"] == [] and state["interrupts"] == []
        history = await lg.threads.get_history(tid, limit=10)
        assert [h["next"] for h in history] == [
            [],
            ["call_model"],
            ["tools"],
            ["call_model"],
            ["__start__"],
        ]
        thread = await lg.threads.get(tid)
        assert thread["status"] == "idle"
        assert thread["values"]["messages"][-1]["type"] == "ai"
        return tid, parts

    tid, parts = asyncio.run(drive())
    updated = [next(iter(d)) for e, d in parts if e == "updates"]
    assert updated == ["call_model", "tools", "call_model"], parts
    # the model's answers token by token (chunks of one id each), the tool's result whole
    said: dict[str, str] = {}
    for e, d in parts:
        if e == "messages":
            said.setdefault(d[0]["id"], d[0]["type"].replace("AIMessageChunk", "ai"))
    assert list(said.values()) == ["ai", "tool", "ai"], parts
    assert sum(1 for e, d in parts if e == "messages") > 3, parts
    assert parts[-1][0] == "values" and len(parts[-1][1]["messages"]) == 4
    assert len(llm.requests) == 2
    assert _counts(notes) == {
        "call_model start": 2,
        "call_model end": 2,
        "search start": 1,
        "search end": 1,
    }
    # A longtask thread: its status, events and costs.
    status = _cli(serve.db, "status", tid)
    assert status["status"] == "completed" and status["task_name"] == "agent"
    kinds = [e["kind"] for e in _cli(serve.db, "events", tid)]
    assert kinds.count("model.call") == 2, kinds


def test_the_sdk_pauses_and_resumes_a_served_graphs_own_interrupt(
    serve: Serve, notes: Path
) -> None:
    async def drive() -> None:
        lg = get_client(url=serve.url, api_key=TOKEN)
        tid = (await lg.threads.create())["thread_id"]
        out = await lg.runs.wait(tid, "ask", input={"topic": "rain"})
        (asked,) = out["__interrupt__"]
        assert asked["value"] == {"question": "Is the draft good?", "draft": "a note on rain"}
        state = await lg.threads.get_state(tid)
        assert state["values"] == {"topic": "rain", "draft": "a note on rain"}
        assert state["next"] == ["ask"]
        assert [i["id"] for i in state["interrupts"]] == [asked["id"]]
        assert [t["name"] for t in state["tasks"]] == ["ask"]
        assert (await lg.threads.get(tid))["status"] == "interrupted"
        # its state is the graph's own: update_state is refused, and nothing changes
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await lg.threads.update_state(tid, {"draft": "edited"})
        assert refused.value.response.status_code == 409
        assert "served LangGraph graph" in refused.value.response.json()["detail"]
        assert (await lg.threads.get_state(tid))["values"] == state["values"]
        parts = [
            (p.event, p.data)
            async for p in lg.runs.stream(
                tid, "ask", command={"resume": "fine"}, stream_mode=["values", "updates"]
            )
        ]
        assert [next(iter(d)) for e, d in parts if e == "updates"] == ["ask", "finish"]
        state = await lg.threads.get_state(tid)
        assert state["values"]["final"] == "a note on rain (fine)"
        history = await lg.threads.get_history(tid, limit=10)
        assert [h["next"] for h in history] == [[], ["finish"], ["ask"], ["draft"], ["__start__"]]
        # a past checkpoint of the graph, by its id
        past = await lg.threads.get_state(tid, checkpoint_id=history[2]["checkpoint_id"])
        assert past["values"] == {"topic": "rain", "draft": "a note on rain"}

    asyncio.run(drive())
    assert _counts(notes) == {
        "draft start": 1,
        "draft end": 1,
        "ask start": 2,  # LangGraph runs an interrupted node again when it is resumed
        "ask end": 1,
        "finish start": 1,
    }


def test_a_run_of_a_served_graph_carries_on_after_serve_is_killed(
    serve: Serve, llm: FakeOpenAI, notes: Path, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    hold.touch()  # the tool waits while this file exists

    async def start() -> str:
        lg = get_client(url=serve.url, api_key=TOKEN)
        tid = (await lg.threads.create())["thread_id"]
        await lg.runs.create(
            tid, "agent", input={"messages": [{"role": "user", "content": QUESTION}]}
        )

        async def searching() -> bool:
            return _counts(notes).get("search start", 0) == 1

        await _until(searching, "the tool to start")
        return tid

    tid = asyncio.run(start())
    serve.kill()  # in the middle of the run: the model's first call done, the tool running
    assert _counts(notes) == {"call_model start": 1, "call_model end": 1, "search start": 1}
    hold.unlink()
    serve.start()

    async def finished() -> None:
        lg = get_client(url=serve.url, api_key=TOKEN)
        await lgdiff_servers.retry_cut_off_call(
            lg, tid, "agent", "search", {"query": "weather in Paris"}
        )
        state = await lg.threads.get_state(tid)
        assert [m["type"] for m in state["values"]["messages"]] == ["human", "ai", "tool", "ai"]
        runs = await lg.runs.list(tid)
        assert runs[0]["status"] == "success"

    asyncio.run(finished())
    # The finished model call was not made again; the tool killed mid-way was put to a
    # person (it carries no mark), who had it called again.
    assert _counts(notes) == {
        "call_model start": 2,
        "call_model end": 2,
        "search start": 2,
        "search end": 1,
    }
    assert len(llm.requests) == 2


def test_threads_of_served_graphs_are_carried_by_a_worker(
    pg_url: str, llm: FakeOpenAI, tmp_path: Path, notes: Path
) -> None:
    """``serve --workers`` records the runs; a ``longtask worker`` started elsewhere (it
    reads no langgraph.json) loads each graph by the reference its thread recorded."""
    server = _serve(pg_url, llm, tmp_path, notes, "--workers")
    with lgdiff_servers.running_worker(pg_url, server.env, tmp_path):
        try:
            server.start()

            async def drive() -> None:
                lg = get_client(url=server.url, api_key=TOKEN)
                tid = (await lg.threads.create())["thread_id"]
                out = await lg.runs.wait(tid, "ask", input={"topic": "rain"})
                assert out["__interrupt__"][0]["value"]["draft"] == "a note on rain"
                out = await lg.runs.wait(tid, "ask", command={"resume": "fine"})
                assert out["final"] == "a note on rain (fine)"
                tid = (await lg.threads.create())["thread_id"]
                out = await lg.runs.wait(
                    tid, "agent", input={"messages": [{"role": "user", "content": QUESTION}]}
                )
                assert out["messages"][-1]["content"] == "It is sunny in Paris."
                # a second message: the worker runs the graph again on the thread's state
                out = await lg.runs.wait(tid, "agent", input=_said("Thanks!"))
                assert [m["type"] for m in out["messages"]] == [*CHAT, "human", "ai"], out
                # streamed: the worker's tokens reach serve's stream (issue 52 item 3), each
                # part with an id a reconnect resumes from
                parts = [
                    p
                    async for p in lg.runs.stream(
                        tid, "agent", input=_said("Again?"), stream_mode="messages-tuple"
                    )
                ]
                tokens = [
                    p.data[0]["content"]
                    for p in parts
                    if p.event == "messages" and p.data[0]["type"] == "AIMessageChunk"
                ]
                assert len(tokens) > 3 and "".join(tokens) == "It is sunny in Paris.", parts
                assert all(p.id for p in parts if p.event == "messages"), parts

            asyncio.run(drive())
        finally:
            server.stop()
    from longtask import Runner

    with Runner(pg_url) as runner:
        threads = runner.threads()
        assert {r.mode for r in threads} == {"worker"}
        assert sorted(r.task_ref.rpartition("#")[2] for r in threads) == ["agent", "ask"]


def _run(db: str, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "longtask", *args, "--db", db],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == code, done.stdout + done.stderr
    return done


def test_the_cli_runs_a_graph_by_reference_and_check_sees_its_changes(
    sqlite_url: str, tmp_path: Path
) -> None:
    """``run``, ``resume``, ``history --inner`` and ``check`` take a graph's reference as they
    take a task's; renaming a node of the graph is a change of the definition."""
    import shutil

    app = tmp_path / "app"
    shutil.copytree(APPS, app)
    ref = f"{app / 'src' / 'ask_graph' / 'graph.py'}:graph#ask"
    _run(sqlite_url, "run", ref, "--thread", "t1", "--input", '{"topic": "rain"}', code=3)
    (pause,) = json.loads(_run(sqlite_url, "pending", "t1", "--json").stdout)
    assert pause["kind"] == "interrupt" and pause["request"]["value"]["draft"] == "a note on rain"
    assert _run(sqlite_url, "check", ref).returncode == 0  # the paused thread is served
    _run(sqlite_url, "resume", "t1", "--interrupt", pause["interrupt_id"], "--resume", '"ok"')
    assert _cli(sqlite_url, "status", "t1")["status"] == "completed"
    inner = _cli(sqlite_url, "history", "t1", "--inner", "ask")
    assert len(inner) == 5, inner  # one checkpoint per super-step of the graph

    _run(sqlite_url, "run", ref, "--thread", "t2", "--input", '{"topic": "sun"}', code=3)
    graph = app / "src" / "ask_graph" / "graph.py"
    graph.write_text(graph.read_text().replace('"finish"', '"wrap_up"'))
    changed = _run(sqlite_url, "check", ref, code=1)
    assert "t2" in changed.stdout, changed.stdout


# -- a second message on the same thread (the graph runs again on its state) ---------------

FOLLOW_UP = "And in Rome?"


def _chat(request: Request) -> Reply:
    """The agent searches once for each question the user asks, then answers it."""
    last = request.messages[-1]
    if last.get("role") == "user":
        return Reply.tool_calls([("search", {"query": f"weather: {last.get('content')}"})])
    asked = next(m for m in reversed(request.messages) if m.get("role") == "user")
    return Reply.text("It is sunny in Paris." if "Paris" in str(asked) else "It rains in Rome.")


@pytest.fixture
def chat_llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(_chat) as server:
        yield server


def _said(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


CHAT = ["human", "ai", "tool", "ai"]


def test_a_second_message_runs_the_served_agent_again_on_its_state(
    db_url: str, chat_llm: FakeOpenAI, tmp_path: Path, notes: Path
) -> None:
    server = _serve(db_url, chat_llm, tmp_path, notes)
    server.start()

    async def drive() -> tuple[str, list[Any]]:
        lg = get_client(url=server.url, api_key=TOKEN)
        tid = (await lg.threads.create())["thread_id"]
        first = await lg.runs.wait(tid, "agent", input=_said(QUESTION))
        assert [m["type"] for m in first["messages"]] == CHAT
        parts = [
            (p.event, p.data)
            async for p in lg.runs.stream(
                tid, "agent", input=_said(FOLLOW_UP), stream_mode=["values", "updates"]
            )
        ]
        state = await lg.threads.get_state(tid)
        messages = state["values"]["messages"]
        assert [m["type"] for m in messages] == CHAT + CHAT, messages
        assert messages[4]["content"] == FOLLOW_UP
        assert messages[-1]["content"] == "It rains in Rome."
        assert state["next"] == [] and (await lg.threads.get(tid))["status"] == "idle"
        # both runs' checkpoints, newest first: the second run's input checkpoint starts it
        history = await lg.threads.get_history(tid, limit=20)
        nexts = [h["next"] for h in history]
        turn = [[], ["call_model"], ["tools"], ["call_model"], ["__start__"]]
        assert nexts == turn + turn, nexts
        assert history[4]["metadata"]["source"] == "input"
        runs = await lg.runs.list(tid)
        assert [r["status"] for r in runs] == ["success", "success"]
        return tid, parts

    try:
        tid, parts = asyncio.run(drive())
    finally:
        server.stop()
    assert [next(iter(d)) for e, d in parts if e == "updates"] == [
        "call_model",
        "tools",
        "call_model",
    ]
    values = [d for e, d in parts if e == "values"]
    assert len(values[0]["messages"]) == 5 and len(values[-1]["messages"]) == 8, values
    assert _counts(notes) == {
        "call_model start": 4,
        "call_model end": 4,
        "search start": 2,
        "search end": 2,
    }
    # the model saw the whole conversation on the second turn
    assert len(chat_llm.requests) == 4 and len(chat_llm.requests[2].messages) == 6
    kinds = [e["kind"] for e in _cli(db_url, "events", tid)]
    assert kinds.count("model.call") == 4 and kinds.count("turn.started") == 1, kinds
    assert _cli(db_url, "status", tid)["status"] == "completed"


def test_a_second_turn_carries_on_after_serve_is_killed_in_it(
    db_url: str, chat_llm: FakeOpenAI, tmp_path: Path, notes: Path
) -> None:
    server = _serve(db_url, chat_llm, tmp_path, notes)
    server.start()
    hold = tmp_path / "hold"

    async def start() -> str:
        lg = get_client(url=server.url, api_key=TOKEN)
        tid = (await lg.threads.create())["thread_id"]
        await lg.runs.wait(tid, "agent", input=_said(QUESTION))
        hold.touch()  # the tool of the second turn waits while this file exists
        await lg.runs.create(tid, "agent", input=_said(FOLLOW_UP))

        async def searching() -> bool:
            return _counts(notes).get("search start", 0) == 2

        await _until(searching, "the second turn's tool to start")
        return tid

    try:
        tid = asyncio.run(start())
        server.kill()  # in the second turn: its model call done, its tool running
        assert _counts(notes) == {
            "call_model start": 3,
            "call_model end": 3,
            "search start": 2,
            "search end": 1,
        }
        hold.unlink()
        server.start()

        async def finished() -> None:
            lg = get_client(url=server.url, api_key=TOKEN)
            await lgdiff_servers.retry_cut_off_call(
                lg, tid, "agent", "search", {"query": f"weather: {FOLLOW_UP}"}
            )
            state = await lg.threads.get_state(tid)
            messages = state["values"]["messages"]
            assert [m["type"] for m in messages] == CHAT + CHAT, messages
            assert messages[-1]["content"] == "It rains in Rome."
            runs = await lg.runs.list(tid)
            # the first turn, the killed one (carried on to the pause) and the answer's
            assert [r["status"] for r in runs] == ["success"] * 3, [r.get("error") for r in runs]

        asyncio.run(finished())
    finally:
        server.stop()
    # Neither turn's finished model call was made again; the killed tool ran again once a
    # person said so.
    assert _counts(notes) == {
        "call_model start": 4,
        "call_model end": 4,
        "search start": 3,
        "search end": 2,
    }
    assert len(chat_llm.requests) == 4


def test_the_cli_and_runner_give_a_served_graphs_thread_a_new_input(
    sqlite_url: str, tmp_path: Path
) -> None:
    """``resume T --input JSON`` (``runner.run_again``) runs a finished graph's thread
    again on its state, and drops the graph's own pending interrupt as LangGraph's server
    does; a LongTask's thread and a new input beside an answer are refused."""
    ref = f"{APPS / 'src' / 'ask_graph' / 'graph.py'}:graph#ask"
    _run(sqlite_url, "run", ref, "--thread", "t1", "--input", '{"topic": "rain"}', code=3)
    (pause,) = json.loads(_run(sqlite_url, "pending", "t1", "--json").stdout)
    _run(sqlite_url, "resume", "t1", "--interrupt", pause["interrupt_id"], "--resume", '"ok"')
    # a new input on the finished graph: it runs from its start again, on its state
    _run(sqlite_url, "resume", "t1", "--input", '{"topic": "snow"}', code=3)
    (again,) = json.loads(_run(sqlite_url, "pending", "t1", "--json").stdout)
    assert again["request"]["value"]["draft"] == "a note on snow"
    assert again["interrupt_id"] != pause["interrupt_id"]
    # a new input while it waits at its interrupt(): the interrupt is dropped
    _run(sqlite_url, "resume", "t1", "--input", '{"topic": "hail"}', code=3)
    (third,) = json.loads(_run(sqlite_url, "pending", "t1", "--json").stdout)
    assert third["request"]["value"]["draft"] == "a note on hail"
    _run(sqlite_url, "resume", "t1", "--interrupt", third["interrupt_id"], "--resume", '"fine"')

    from longtask import Runner

    with Runner(sqlite_url) as runner:
        assert runner.result("t1", "ask")["final"] == "a note on hail (fine)"
        turns = runner.events("t1", kinds=["turn.started"])
        assert [e.data["from_status"] for e in turns] == ["completed", "waiting_user"]
        inner = runner.inner_history("t1", "ask", limit=100)
        # each run's checkpoints in the graph's one namespace: three runs' input checkpoints
        assert [c.source for c in inner].count("input") == 3, inner
    mixed = _run(sqlite_url, "resume", "t1", "--input", "{}", "--resume", "1", code=2)
    assert "--input" in mixed.stdout + mixed.stderr


# -- time travel: a fork at an earlier turn continues from the graph's state there --------


def test_a_fork_after_the_first_turn_has_that_turns_state_only(
    db_url: str, chat_llm: FakeOpenAI, tmp_path: Path, notes: Path, monkeypatch: Any
) -> None:
    """Two turns served, then ``longtask fork`` at the checkpoint after the first with a
    different second message and ``longtask resume``: the graph runs on its state as it was
    after the first turn (the second turn's messages are not in the fork); the original
    line's state is as it was."""
    server = _serve(db_url, chat_llm, tmp_path, notes)
    server.start()

    async def two_turns() -> tuple[str, str]:
        lg = get_client(url=server.url, api_key=TOKEN)
        tid = (await lg.threads.create())["thread_id"]
        await lg.runs.wait(tid, "agent", input=_said(QUESTION))
        await lg.runs.wait(tid, "agent", input=_said(FOLLOW_UP))
        return tid, (await lg.threads.get_state(tid))["checkpoint_id"]

    try:
        tid, original_head = asyncio.run(two_turns())
    finally:
        server.stop()
    outer = _cli(db_url, "history", tid, "--limit", "100")
    turn_two = next(c for c in outer if c["source"] == "input" and c["parent_id"])
    after_one = turn_two["parent_id"]
    monkeypatch.setenv("OPENAI_BASE_URL", chat_llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-plain")
    monkeypatch.setenv("LGAPPS_NOTES", str(notes))
    other = json.dumps(_said("And in Oslo?"))
    forked = _run(db_url, "fork", tid, after_one, "--inputs", other)
    assert "longtask resume" in forked.stdout
    _run(db_url, "resume", tid)
    # the fork's model call saw the first turn and the new message, not the second turn
    assert len(chat_llm.requests) == 6
    # (the system prompt, the first turn's four messages, the new one)
    assert len(chat_llm.requests[4].messages) == 6, chat_llm.requests[4].messages
    assert "Rome" not in json.dumps(chat_llm.requests[4].messages)

    server.start()

    async def states() -> None:
        lg = get_client(url=server.url, api_key=TOKEN)
        state = await lg.threads.get_state(tid)
        said = [m["content"] for m in state["values"]["messages"] if m["type"] == "human"]
        assert said == [QUESTION, "And in Oslo?"], state["values"]["messages"]
        assert [m["type"] for m in state["values"]["messages"]] == CHAT + CHAT
        # the original line: its head has both turns, as before the fork
        before = await lg.threads.get_state(tid, checkpoint_id=original_head)
        said = [m["content"] for m in before["values"]["messages"] if m["type"] == "human"]
        assert said == [QUESTION, FOLLOW_UP]
        assert before["values"]["messages"][-1]["content"] == "It rains in Rome."

    try:
        asyncio.run(states())
    finally:
        server.stop()
    assert _cli(db_url, "status", tid)["status"] == "completed"
    kinds = [e["kind"] for e in _cli(db_url, "events", tid)]
    assert kinds.count("longtask.completed") == 3, kinds  # each run's end, the fork's too
    # the first turn's nodes did not run again on the fork
    assert _counts(notes)["call_model start"] == 6


def test_a_run_from_a_past_checkpoint_of_the_graph_branches_the_thread_there(
    db_url: str, chat_llm: FakeOpenAI, tmp_path: Path, notes: Path
) -> None:
    """The Server API's history of a served graph's thread lists the graph's own
    checkpoints; a run with a new message from the one the first turn ended at (as a chat
    UI edits the second message) has the first turn and the new message only, and the
    original line's checkpoints keep their state. A run from a checkpoint the graph does
    not have is refused, storing nothing."""
    server = _serve(db_url, chat_llm, tmp_path, notes)
    server.start()

    async def drive() -> None:
        lg = get_client(url=server.url, api_key=TOKEN)
        tid = (await lg.threads.create())["thread_id"]
        await lg.runs.wait(tid, "agent", input=_said(QUESTION))
        await lg.runs.wait(tid, "agent", input=_said(FOLLOW_UP))
        head = (await lg.threads.get_state(tid))["checkpoint_id"]
        history = await lg.threads.get_history(tid, limit=20)
        assert [h["next"] for h in history][4:6] == [["__start__"], []]
        after_one = history[5]["checkpoint_id"]  # the first turn's end
        assert history[4]["parent_checkpoint_id"] == after_one
        with pytest.raises(Exception, match="no checkpoint"):
            await lg.runs.wait(tid, "agent", input=_said("x"), checkpoint_id="1f0-not-one")
        with pytest.raises(Exception, match="takes the new input"):
            await lg.runs.wait(tid, "agent", checkpoint_id=after_one)
        assert (await lg.threads.get_state(tid))["checkpoint_id"] == head
        done = await lg.runs.wait(
            tid, "agent", input=_said("And in Oslo?"), checkpoint_id=after_one
        )
        said = [m["content"] for m in done["messages"] if m["type"] == "human"]
        assert said == [QUESTION, "And in Oslo?"], done["messages"]
        state = await lg.threads.get_state(tid)
        assert [m["type"] for m in state["values"]["messages"]] == CHAT + CHAT
        assert state["checkpoint_id"] != head
        # the branch's first checkpoint stands on the first turn's end
        branch = await lg.threads.get_history(tid, limit=5)
        assert branch[4]["next"] == ["__start__"]
        assert branch[4]["parent_checkpoint_id"] == after_one
        # the original line is as it was
        before = await lg.threads.get_state(tid, checkpoint_id=head)
        said = [m["content"] for m in before["values"]["messages"] if m["type"] == "human"]
        assert said == [QUESTION, FOLLOW_UP]
        # and a run from the original line's end goes on from there
        again = await lg.runs.wait(tid, "agent", input=_said("And in Bern?"), checkpoint_id=head)
        said = [m["content"] for m in again["messages"] if m["type"] == "human"]
        assert said == [QUESTION, FOLLOW_UP, "And in Bern?"]
        # from inside the first turn (its input applied, its model not called yet)
        assert history[8]["next"] == ["call_model"]
        inside = await lg.runs.wait(
            tid, "agent", input=_said("In Lima?"), checkpoint_id=history[8]["checkpoint_id"]
        )
        said = [m["content"] for m in inside["messages"] if m["type"] == "human"]
        assert said == [QUESTION, "In Lima?"] and len(inside["messages"]) == 5, inside
        runs = await lg.runs.list(tid)
        assert [r["status"] for r in runs] == ["success"] * 5

    try:
        asyncio.run(drive())
    finally:
        server.stop()
    assert _counts(notes)["call_model start"] == 10  # no turn's nodes ran twice


def test_a_branch_run_carries_on_after_serve_is_killed_in_it(
    db_url: str, chat_llm: FakeOpenAI, tmp_path: Path, notes: Path
) -> None:
    """A run from a past checkpoint, killed (SIGKILL) in its tool call: after a restart
    it carries on in its branch, on the first turn's state, without running a finished
    node again."""
    server = _serve(db_url, chat_llm, tmp_path, notes)
    server.start()
    hold = tmp_path / "hold"

    async def start() -> tuple[str, str]:
        lg = get_client(url=server.url, api_key=TOKEN)
        tid = (await lg.threads.create())["thread_id"]
        await lg.runs.wait(tid, "agent", input=_said(QUESTION))
        await lg.runs.wait(tid, "agent", input=_said(FOLLOW_UP))
        head = (await lg.threads.get_state(tid))["checkpoint_id"]
        after_one = [h for h in await lg.threads.get_history(tid, limit=20) if h["next"] == []]
        hold.touch()  # the branch's tool waits while this file exists
        await lg.runs.create(
            tid, "agent", input=_said("And in Oslo?"), checkpoint_id=after_one[-1]["checkpoint_id"]
        )

        async def searching() -> bool:
            return _counts(notes).get("search start", 0) == 3

        await _until(searching, "the branch's tool to start")
        return tid, head

    try:
        tid, head = asyncio.run(start())
        server.kill()
        hold.unlink()
        server.start()

        async def finished() -> None:
            lg = get_client(url=server.url, api_key=TOKEN)
            await lgdiff_servers.retry_cut_off_call(
                lg, tid, "agent", "search", {"query": "weather: And in Oslo?"}
            )
            state = await lg.threads.get_state(tid)
            said = [m["content"] for m in state["values"]["messages"] if m["type"] == "human"]
            assert said == [QUESTION, "And in Oslo?"], state["values"]["messages"]
            assert [m["type"] for m in state["values"]["messages"]] == CHAT + CHAT
            before = await lg.threads.get_state(tid, checkpoint_id=head)
            said = [m["content"] for m in before["values"]["messages"] if m["type"] == "human"]
            assert said == [QUESTION, FOLLOW_UP]

        asyncio.run(finished())
    finally:
        server.stop()
    # the branch's model call was not made again; the killed tool ran again once a person
    # said so
    assert _counts(notes) == {
        "call_model start": 6,
        "call_model end": 6,
        "search start": 4,
        "search end": 3,
    }
    assert len(chat_llm.requests) == 6
