"""An accepted answer to a graph's ``interrupt()`` is durable through the Server API (both
backends): the graph of ``graph_answer_task.py``, served by ``longtask serve --config
langgraph.json``, asks; alice answers with LangGraph's ``command={"resume": ...}`` through
the Python SDK, and serve is SIGKILLed in the tool the answer goes to, before anything of
that node is stored. Once serve is restarted the thread completes with the answer, and the
question is not asked again (without the answer kept at acceptance, the restarted serve
continued the thread to the question, asked it again, and then carried out the recorded
run's answer a second time)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import counter
import lgdiff_servers
from langgraph_sdk import get_client

from longtask import Runner

HERE = Path(__file__).resolve().parent
TOKEN = "tok-alice-answer"
#: no model is called: the server needs a URL all the same
NO_LLM = "http://127.0.0.1:9/v1"


def _server(db_url: str, tmp_path: Path) -> lgdiff_servers.Server:
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": {"pick": f"{HERE / 'graph_answer_task.py'}:graph"}}))
    server = lgdiff_servers.config_longtask_server(db_url, NO_LLM, TOKEN, config)
    server.env.update(
        {counter.ENV_VAR: str(tmp_path / "calls.db"), "LT_CRASH_MARKER": str(tmp_path / "crashed")}
    )
    return server


async def _ask(url: str) -> tuple[str, Any]:
    """A thread's first run, to the graph's question: the thread and the interrupts."""
    lg = get_client(url=url, api_key=TOKEN)
    tid = str((await lg.threads.create())["thread_id"])
    out = await lg.runs.wait(tid, "pick", input={})
    return tid, out["__interrupt__"]


async def _answer(url: str, tid: str) -> str:
    lg = get_client(url=url, api_key=TOKEN)
    run = await lg.runs.create(tid, "pick", command={"resume": "blue"})
    return str(run["run_id"])


async def _finished(url: str, tid: str, run_id: str) -> tuple[Any, Any, str]:
    """The thread's state and interrupts, and the answer's run status, once it is idle."""
    lg = get_client(url=url, api_key=TOKEN)
    deadline = time.monotonic() + 120
    while (await lg.threads.get(tid))["status"] != "idle":
        assert time.monotonic() < deadline, "the thread did not finish after the restart"
        await asyncio.sleep(0.1)
    state = await lg.threads.get_state(tid)
    thread = await lg.threads.get(tid)
    run = await lg.runs.get(tid, run_id)
    return state["values"], thread["interrupts"], str(run["status"])


def test_an_answer_accepted_by_the_server_api_survives_kill_9(db_url: str, tmp_path: Path) -> None:
    calls = tmp_path / "calls.db"
    server = _server(db_url, tmp_path).start()
    try:
        tid, asked = asyncio.run(_ask(server.url))
        assert asked[0]["value"] == {"question": "Which colour?"}
        run_id = asyncio.run(_answer(server.url, tid))
        assert server.proc is not None
        assert server.proc.wait(timeout=120) == -9, server.output()  # the tool's SIGKILL
        assert counter.counts(calls) == {"ask": 2, "tool:blue": 1}
        server.start()
        values, interrupts, status = asyncio.run(_finished(server.url, tid, run_id))
    finally:
        assert TOKEN not in server.stop()
    assert values == {"answer": "blue"}
    assert interrupts == {}
    assert status == "success"
    # the node ran once more, with the answer: it never stopped at the question again
    assert counter.counts(calls) == {"ask": 3, "tool:blue": 2}
    with Runner(db_url) as runner:
        assert runner.status(tid).status == "completed"
        assert len(runner.events(tid, kinds=["interrupt.required"])) == 1
        (resolved,) = runner.events(tid, kinds=["interrupt.resolved"])
        assert resolved.data["by"] == "alice"
        assert resolved.data["value"] == "blue"


def test_an_answer_a_worker_was_carrying_out_survives_its_kill_9(
    pg_url: str, tmp_path: Path
) -> None:
    """``serve --workers`` on PostgreSQL: the worker that carries the answer out is the
    process killed in the tool; the next worker takes its job over and completes the thread
    with the answer. The job carries the queued answer out again (the worker's inbox keeps
    it until the job ends): still one ``interrupt.resolved``, not one per try."""
    calls = tmp_path / "calls.db"
    server = _server(pg_url, tmp_path)
    server.args.append("--workers")
    try:
        with lgdiff_servers.running_worker(
            pg_url, server.env, HERE, "--stalled-after", "2"
        ) as worker:
            server.start()
            tid, asked = asyncio.run(_ask(server.url))
            assert asked[0]["value"] == {"question": "Which colour?"}
            run_id = asyncio.run(_answer(server.url, tid))
            assert worker.wait(timeout=120) == -9  # the tool's SIGKILL
        assert counter.counts(calls) == {"ask": 2, "tool:blue": 1}
        with lgdiff_servers.running_worker(pg_url, server.env, HERE, "--stalled-after", "2"):
            values, interrupts, status = asyncio.run(_finished(server.url, tid, run_id))
    finally:
        assert TOKEN not in server.stop()
    assert (values, interrupts, status) == ({"answer": "blue"}, {}, "success")
    assert counter.counts(calls) == {"ask": 3, "tool:blue": 2}
    with Runner(pg_url) as runner:
        rec = runner.db.store.get_thread(tid)
        assert rec is not None and rec.mode == "worker" and rec.status == "completed"
        assert len(runner.events(tid, kinds=["interrupt.required"])) == 1
        (resolved,) = runner.events(tid, kinds=["interrupt.resolved"])
        assert resolved.data["by"] == "alice"
        assert resolved.data["value"] == "blue"
