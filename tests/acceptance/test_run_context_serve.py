"""A served LangGraph graph's run context, against LangGraph's own server: the graph of
``tests/integration/context_graph.py`` (settings in a context schema with defaults, read as
``runtime.context`` and from ``config["configurable"]``, an ``interrupt()`` between a draft
and its review), unmodified, served by LangGraph's server (``langgraph-api``, in memory) and
by ``longtask serve --config langgraph.json`` (both backends), driven through the Python SDK:
a run without a context, with ``context``, and with ``config.configurable`` give the same
draft and final state on both. Then what longtask adds: the context is kept with the thread,
so it survives ``kill -9`` of serve at the pause and reaches a worker (``serve --workers``,
PostgreSQL); a resume without a context keeps it (LangGraph's server gives that run the
schema's defaults: an intended difference, listed in server-differences.md), and a resume
that sends another is refused (422), changing nothing.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import lgdiff_servers
import pytest
from langgraph_sdk import get_client
from test_lg_differential import _needed

GRAPH = Path(__file__).parent.parent / "integration" / "context_graph.py"
GRAPHS = {"ctx": f"{GRAPH}:graph"}
TOKEN = "tok-alice-context"
#: no model is called: the servers need a URL all the same
NO_LLM = "http://127.0.0.1:9/v1"

#: (what the run that starts the thread sends, what its resume sends)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "none": ({}, {}),
    "context": ({"context": {"greeting": "hi"}}, {"context": {"greeting": "hi"}}),
    "configurable": (
        {"config": {"configurable": {"greeting": "yo", "model": "large"}}},
        {"config": {"configurable": {"greeting": "yo"}}},
    ),
}


@pytest.fixture(scope="module")
def reference() -> Iterator[lgdiff_servers.Server]:
    server = _needed(
        "LangGraph's server",
        lambda: lgdiff_servers.graphs_reference_server(NO_LLM, GRAPHS).start(),
    )
    yield server
    server.stop()


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "langgraph.json"
    config.write_text(json.dumps({"graphs": GRAPHS}))
    return config


def _longtask(db: str, tmp_path: Path, *extra: str) -> lgdiff_servers.Server:
    return lgdiff_servers.config_longtask_server(db, NO_LLM, TOKEN, _config(tmp_path), *extra)


async def _start(url: str, sent: dict[str, Any]) -> tuple[str, str]:
    """A new thread's first run, to the graph's interrupt: the thread and the draft."""
    lg = get_client(url=url, api_key=TOKEN)
    tid = (await lg.threads.create())["thread_id"]
    out = await lg.runs.wait(tid, "ctx", input={"topic": "tides"}, **sent)
    return tid, str(out["__interrupt__"][0]["value"]["draft"])


async def _resume(url: str, tid: str, sent: dict[str, Any]) -> str:
    lg = get_client(url=url, api_key=TOKEN)
    out = await lg.runs.wait(tid, "ctx", command={"resume": "ok"}, **sent)
    return str(out["final"])


async def _cases(url: str) -> dict[str, tuple[str, str]]:
    seen = {}
    for name, (start, resume) in CASES.items():
        tid, draft = await _start(url, start)
        seen[name] = (draft, await _resume(url, tid, resume))
    return seen


def test_a_served_graph_gets_the_run_context_langgraphs_server_gives_it(
    reference: lgdiff_servers.Server, db_url: str, tmp_path: Path
) -> None:
    expected = asyncio.run(_cases(reference.url))
    # what LangGraph's server does, so the comparison below compares something
    assert expected == {
        "none": ("hello tides (small)", "hello tides (small) / ok / hello / None"),
        "context": ("hi tides (small)", "hi tides (small) / ok / hi / hi"),
        "configurable": ("yo tides (large)", "yo tides (large) / ok / yo / yo"),
    }
    server = _longtask(db_url, tmp_path).start()
    try:
        assert asyncio.run(_cases(server.url)) == expected
    finally:
        assert TOKEN not in server.stop()


def test_the_context_is_kept_with_the_thread_across_kill_9_and_resumes(
    reference: lgdiff_servers.Server, db_url: str, tmp_path: Path
) -> None:
    # LangGraph's server: a resume without a context gets the schema's defaults
    tid, draft = asyncio.run(_start(reference.url, {"context": {"greeting": "hi"}}))
    assert asyncio.run(_resume(reference.url, tid, {})) == "hi tides (small) / ok / hello / None"

    server = _longtask(db_url, tmp_path).start()
    try:
        tid, draft = asyncio.run(_start(server.url, {"context": {"greeting": "hi"}}))
        assert draft == "hi tides (small)"
        assert server.proc is not None
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait()
        server.start()

        # another context on a run that continues the thread: refused, nothing changes
        with pytest.raises(httpx.HTTPStatusError) as refused:
            asyncio.run(_resume(server.url, tid, {"context": {"greeting": "bye"}}))
        assert refused.value.response.status_code == 422
        assert "greeting differ" in refused.value.response.text
        state = httpx.get(
            f"{server.url}/threads/{tid}/state", headers={"X-Api-Key": TOKEN}, timeout=30
        ).json()
        assert state["next"] and state["values"].get("final") is None

        # longtask: the thread goes on with the context it was started with
        assert asyncio.run(_resume(server.url, tid, {})) == "hi tides (small) / ok / hi / hi"
    finally:
        assert TOKEN not in server.stop()


def test_a_worker_runs_a_served_graph_with_the_context_of_its_run(
    pg_url: str, tmp_path: Path
) -> None:
    server = _longtask(pg_url, tmp_path, "--workers")
    with lgdiff_servers.running_worker(pg_url, server.env, tmp_path):
        try:
            server.start()
            tid, draft = asyncio.run(_start(server.url, {"context": {"model": "large"}}))
            assert draft == "hello tides (large)"
            final = asyncio.run(_resume(server.url, tid, {}))
            assert final == "hello tides (large) / ok / hello / None"
        finally:
            server.stop()
    from longtask import Runner

    with Runner(pg_url) as runner:
        rec = runner.db.store.get_thread(tid)
        assert rec is not None and rec.mode == "worker"
        assert rec.context == {"model": "large"}
