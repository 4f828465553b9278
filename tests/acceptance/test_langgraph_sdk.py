"""The official LangGraph SDK drives ``longtask serve`` (a real process) through the LangGraph
Server API, on SQLite and PostgreSQL: assistants for the registered tasks, a thread of a task
with parallel steps, an approval and a wait, a streamed run, the interrupt in the thread's
state answered with ``command={"resume": ...}``, join, history and cancel. And runs happen
outside the request: an approval answers before the next (long) step has finished, and a
``serve`` killed in the middle of that step continues the thread when it starts again.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import lgdiff_servers
import pytest
from langgraph_sdk import get_client

HERE = Path(__file__).parent
TASKS = HERE / "lg_task.py"
TOKEN = "tok-alice-lg"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Serve:
    """A ``longtask serve`` process with the test tasks registered; restartable."""

    def __init__(self, db: str, env: dict[str, str], *extra: str) -> None:
        self.db = db
        self.extra = list(extra)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "LONGTASK_API_TOKENS": f"alice={TOKEN}", **env}
        self.env.pop("LONGTASK_API_TOKEN", None)
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        args = ["serve", "--port", str(self.port), "--db", self.db, *self.extra]
        for name in ("RELEASE", "LONG", "SLEEPY"):
            args += ["--task", f"{TASKS}:{name}"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "longtask", *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                out, err = self.proc.communicate()
                pytest.fail(f"longtask serve exited with {self.proc.returncode}:\n{out}{err}")
            try:
                if httpx.get(f"{self.url}/ok", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "longtask serve did not answer within 30 s"
            time.sleep(0.1)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate()

    def stop(self) -> str:
        if self.proc is None or self.proc.poll() is not None:
            return ""
        self.proc.terminate()
        try:
            out, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        return out + err


@pytest.fixture
def serve(db_url: str, tmp_path: Path) -> Iterator[Serve]:
    server = Serve(
        db_url,
        {
            "LT_LONG_STARTED": str(tmp_path / "long.started"),
            "LT_LONG_DONE": str(tmp_path / "long.done"),
            "LT_SLEEPY_GATE": str(tmp_path / "sleepy.gate"),
        },
    )
    server.start()
    try:
        yield server
    finally:
        assert TOKEN not in server.stop(), "the server printed a token"


def client(serve: Serve, api_key: str | None = TOKEN) -> Any:
    return get_client(url=serve.url, api_key=api_key)


async def _until(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


@pytest.fixture
def serve_with_worker(pg_url: str, tmp_path: Path) -> Iterator[Serve]:
    """``longtask serve --workers`` and one ``longtask worker`` on PostgreSQL."""
    # The naps wait for the test's gate, so the cancel always comes before the last one.
    server = Serve(pg_url, {"LT_SLEEPY_GATE": str(tmp_path / "sleepy.gate")}, "--workers")
    with lgdiff_servers.running_worker(pg_url, server.env, None, "--stalled-after", "2"):
        try:
            server.start()
            yield server
        finally:
            server.stop()


def test_sdk_drives_a_task_through_approval_wait_and_cancel(serve: Serve) -> None:
    asyncio.run(_drive(serve))


def test_sdk_drives_threads_served_by_a_worker(serve_with_worker: Serve, pg_url: str) -> None:
    asyncio.run(_drive(serve_with_worker))
    from longtask import Runner

    with Runner(pg_url) as runner:
        modes = {r.mode for r in runner.threads()}
    assert modes == {"worker"}  # every thread was advanced by the worker, not by serve


async def _drive(serve: Serve) -> None:
    """The whole tour through the SDK (see the module's docstring)."""
    lg = client(serve)
    assistants = await lg.assistants.search(graph_id="lg_release")
    assert [a["graph_id"] for a in assistants] == ["lg_release"]
    assistant = assistants[0]["assistant_id"]
    assert (await lg.assistants.get(assistant))["name"] == "lg_release"
    graph = await lg.assistants.get_graph(assistant)
    assert {"fetch_a", "fetch_b"} <= {n["id"] for n in graph["nodes"]}
    schemas = await lg.assistants.get_schemas(assistant)
    assert "ship_ok" in schemas["state_schema"]["properties"]

    thread = await lg.threads.create(metadata={"purpose": "test"})
    tid = thread["thread_id"]
    assert (await lg.threads.get(tid))["status"] == "idle"

    parts = [
        p
        async for p in lg.runs.stream(
            tid, "lg_release", input={}, stream_mode=["updates", "values", "custom"]
        )
    ]
    kinds = [p.event for p in parts]
    assert kinds[0] == "metadata"
    updates = [p.data for p in parts if p.event == "updates"]
    # LangGraph's shape, {node: {key: value}}: a step's node wrote the key named after it
    assert {"fetch_a": {"fetch_a": {"a": 1}}} in updates
    assert {"fetch_b": {"fetch_b": {"b": 2}}} in updates
    interrupt = next(u["__interrupt__"] for u in updates if "__interrupt__" in u)
    assert interrupt[0]["value"]["step"] == "ship_ok"
    values = [p.data for p in parts if p.event == "values"]
    assert values[-1]["fetch_a"] == {"a": 1}
    custom = [p.data["kind"] for p in parts if p.event == "custom"]
    assert "approval.required" in custom

    state = await lg.threads.get_state(tid)
    assert [i["value"]["step"] for i in state["interrupts"]] == ["ship_ok"]
    assert state["values"]["fetch_b"] == {"b": 2}
    assert (await lg.threads.get(tid))["status"] == "interrupted"
    found = await lg.threads.search(status="interrupted")
    assert tid in [t["thread_id"] for t in found]

    # A wrong answer is refused at once and changes nothing.
    with pytest.raises(httpx.HTTPStatusError) as bad:
        await lg.runs.create(tid, assistant, command={"resume": {"maybe": 1}})
    assert bad.value.response.status_code == 409
    assert "answer an approval with true/false" in str(bad.value)  # said through the SDK
    # Without a token nothing is recorded.
    with pytest.raises(httpx.HTTPStatusError) as anon:
        await client(serve, api_key=None).runs.create(tid, assistant, command={"resume": True})
    assert anon.value.response.status_code == 401

    run = await lg.runs.create(
        tid, assistant, command={"resume": {"approved": True, "comment": "ok"}}
    )
    assert run["status"] in ("pending", "running", "success")
    joined = [
        p async for p in lg.runs.join_stream(tid, run["run_id"], stream_mode=["updates", "events"])
    ]
    decided = {p.data["ship_ok"]["ship_ok"]["by"] for p in joined if "ship_ok" in (p.data or {})}
    assert decided == {"alice"}
    assert "approval.resolved" in {p.data["name"] for p in joined if p.event == "events"}
    await lg.runs.join(tid, run["run_id"])
    done = await lg.runs.get(tid, run["run_id"])
    assert done["status"] == "success"  # it stopped at the wait for ci, as LangGraph says
    state = await lg.threads.get_state(tid)
    assert state["values"]["ship_ok"]["by"] == "alice"  # the token's name
    assert [i["value"]["step"] for i in state["interrupts"]] == ["ci"]

    final = await lg.runs.wait(tid, assistant, command={"resume": {"status": "passed"}})
    assert final["finish"] == "shipped after ci passed by alice"
    assert (await lg.threads.get(tid))["status"] == "idle"
    runs = await lg.runs.list(tid)
    assert len(runs) == 3 and runs[0]["status"] == "success"
    history = await lg.threads.get_history(tid, limit=100)
    assert len(history) > 3
    assert "finish" in history[0]["values"] and "finish" not in history[-1]["values"]

    # Cancel a run of another thread while it runs.
    other = await lg.threads.create()
    sleepy = await lg.runs.create(other["thread_id"], "lg_sleepy", input={})
    await _until(lambda: _status(lg, other["thread_id"], sleepy["run_id"], "running"), "the run")
    await lg.runs.cancel(other["thread_id"], sleepy["run_id"])
    await _until(lambda: _cancel_recorded(serve.db, other["thread_id"]), "the cancel request")
    Path(serve.env["LT_SLEEPY_GATE"]).touch()  # the running nap ends; the next is not started
    await lg.runs.join(other["thread_id"], sleepy["run_id"])
    cancelled = await lg.runs.get(other["thread_id"], sleepy["run_id"])
    assert cancelled["status"] == "interrupted"
    after = await lg.threads.get(other["thread_id"])
    assert after["metadata"]["longtask_status"] == "cancelled"
    assert "nap3" not in after["values"]


async def _cancel_recorded(db: str, thread_id: str) -> bool:
    from longtask import Runner

    with Runner(db) as runner:
        return runner.db.store.cancel_request(thread_id) is not None


async def _status(lg: Any, thread_id: str, run_id: str, status: str) -> bool:
    return bool((await lg.runs.get(thread_id, run_id))["status"] == status)


def test_approval_answers_at_once_and_the_run_survives_a_killed_serve(
    serve: Serve, tmp_path: Path
) -> None:
    started, done = tmp_path / "long.started", tmp_path / "long.done"

    async def approve() -> str:
        lg = client(serve)
        thread = await lg.threads.create()
        tid = thread["thread_id"]
        await lg.runs.wait(tid, "lg_long", input={})
        state = await lg.threads.get_state(tid)
        assert [i["value"]["step"] for i in state["interrupts"]] == ["go"]
        run = await lg.runs.create(tid, "lg_long", command={"resume": True})
        # The request answered before the 30 s step could finish: it runs in the background.
        assert not done.exists()
        assert run["status"] in ("pending", "running")
        await _until(lambda: _exists(started), "the long step to start")
        return tid

    tid = asyncio.run(approve())
    serve.kill()  # in the middle of the long step
    assert not done.exists()
    serve.start()

    async def finished() -> None:
        lg = client(serve)

        async def idle() -> bool:
            return bool((await lg.threads.get(tid))["status"] == "idle")

        await _until(idle, "the thread to complete after the restart", timeout=120)
        state = await lg.threads.get_state(tid)
        assert state["values"]["long_step"] == "long done"
        runs = await lg.runs.list(tid)
        assert runs[0]["status"] == "success"

    asyncio.run(finished())
    assert done.exists()


async def _exists(path: Path) -> bool:
    return path.exists()


def test_a_run_webhook_owed_by_a_killed_serve_is_delivered_after_it_starts_again(
    db_url: str, tmp_path: Path
) -> None:
    """A real ``serve`` ends a run whose receiver is down, and is killed (SIGKILL) before the
    delivery's next attempt; the receiver comes back, ``serve`` starts again and delivers
    the run, with the idempotency key of the first attempt."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from langgraph_sdk import get_sync_client

    from longtask import Runner

    got: list[tuple[str, dict[str, Any]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            got.append((self.headers["Idempotency-Key"], body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    port = _free_port()  # nothing listens on it yet: the receiver is down
    server = Serve(db_url, {"LONGTASK_WEBHOOK_ALLOW": "127.0.0.1", "LT_SLEEPY": "0"})
    server.start()
    receiver: ThreadingHTTPServer | None = None
    try:
        lg = get_sync_client(url=server.url, api_key=TOKEN)
        thread = lg.threads.create()["thread_id"]
        webhook = f"http://127.0.0.1:{port}/hook"
        run = lg.runs.create(thread, "lg_sleepy", input={}, webhook=webhook)
        lg.runs.join(thread, run["run_id"])

        def failed_once() -> bool:
            with Runner(db_url) as runner:
                return any(e.kind == "notify.failed" for e in runner.events(thread))

        deadline = time.monotonic() + 60
        while not failed_once():
            assert time.monotonic() < deadline, "no failed attempt was recorded"
            time.sleep(0.1)
        server.kill()  # the next attempt is due seconds later: it never happens here
        assert got == []

        receiver = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=receiver.serve_forever, daemon=True).start()
        server.start()
        deadline = time.monotonic() + 60
        while not got:
            assert time.monotonic() < deadline, "the restarted serve did not deliver the run"
            time.sleep(0.1)
    finally:
        server.stop()
        if receiver is not None:
            receiver.shutdown()
            receiver.server_close()
    assert [key for key, _ in got] == [run["run_id"]]
    assert got[0][1]["status"] == "success"
    assert got[0][1]["values"] == {"nap1": "nap1", "nap2": "nap2", "nap3": "nap3"}
    with Runner(db_url) as runner:
        sent = [e for e in runner.events(thread) if e.kind == "notify.sent"]
    assert len(sent) == 1 and sent[0].attempt >= 2


def test_a_run_a_worker_finished_while_serve_was_down_ends_after_serve_starts_again(
    serve_with_worker: Serve, tmp_path: Path
) -> None:
    """``serve --workers`` hands a run's thread to the workers and follows it; killed
    (SIGKILL) while it follows, it finds the run open when it starts again — after the
    worker has finished the thread. The run ends (success), and the executor's threads are
    not held by a follow that waits for a worker's turn that already came."""
    from langgraph_sdk import get_sync_client

    lg = get_sync_client(url=serve_with_worker.url, api_key=TOKEN)
    thread = lg.threads.create()["thread_id"]
    run = lg.runs.create(thread, "lg_sleepy", input={})

    from longtask import Runner

    with Runner(serve_with_worker.db) as runner:
        deadline = time.monotonic() + 60
        # (the run is recorded; its thread is made when the executor takes the run)
        while runner.db.store.get_thread(thread) is None or not any(
            e.kind == "step.started" for e in runner.events(thread)
        ):
            assert time.monotonic() < deadline, "the worker did not start the thread"
            time.sleep(0.1)
        assert lg.runs.get(thread, run["run_id"])["status"] == "running"
        serve_with_worker.kill()  # while it follows the worker
        (tmp_path / "sleepy.gate").touch()
        deadline = time.monotonic() + 90
        while runner.status(thread).status != "completed":
            assert time.monotonic() < deadline, "the worker did not finish the thread"
            time.sleep(0.2)
    serve_with_worker.start()
    lg = get_sync_client(url=serve_with_worker.url, api_key=TOKEN)
    deadline = time.monotonic() + 30
    while lg.runs.get(thread, run["run_id"])["status"] in ("pending", "running"):
        assert time.monotonic() < deadline, "the recovered run never ended"
        time.sleep(0.2)
    assert lg.runs.get(thread, run["run_id"])["status"] == "success"
