"""The differential test of ``longtask serve`` against LangGraph's own server (issue 27).

The same chat graph (an agent step over ChatOpenAI with a tool, run as a subgraph -> an
approval -> a last step) is served by LangGraph's server (``langgraph-api`` with the
in-memory runtime, what ``langgraph dev`` runs; ``lgdiff_graph.py``) and by
``longtask serve`` (the LongTask ``lgdiff_task.py``), both calling the scripted
OpenAI-compatible server of ``tests/fakes``. One script (``lgdiff_drive.py`` through the
Python SDK and RemoteGraph, ``lgdiff_drive.mjs`` through the JS SDK) drives each, and
every answer and stream part is compared by shape (``lgdiff_shapes.py``): keys and value
types, kinds (``type``, ``event``, ``status``, ``next``), the parts of each stream and the
order they come in; ids and timestamps aside. What differs on purpose is
``lgdiff_shapes.INTENDED``, each with its reason; anything else fails the test, printed
one difference a line.

LangGraph's server and the JS SDK are installed from the registries into a cache outside
the repository on first use (``lgdiff_servers.py``); in CI an install that fails fails the
test.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import lgdiff_assistants
import lgdiff_drive
import lgdiff_misc
import lgdiff_more
import lgdiff_servers
import lgdiff_shapes
import pytest
from fakes import FakeOpenAI, Reply, Request
from langgraph_sdk import get_sync_client
from lgdiff_shapes import (
    INTENDED,
    Difference,
    Intended,
    diff_answer,
    diff_traces,
    event_name,
    shape,
    split,
)

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
TOKEN = "tok-alice-lgdiff"


def _script(request: Request) -> Reply:
    """The agent looks the topic up once, then answers."""
    if request.turn == 0:
        return Reply.tool_calls([("lookup", {"topic": "weather"})])
    return Reply.text("It is sunny.")


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(_script) as server:
        yield server


def _needed(what: str, make: Any) -> Any:
    try:
        return make()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{what}: {exc} (CI is set: the differential test must run)")
        pytest.skip(f"{what}: {exc}")


@pytest.fixture(scope="module")
def reference(llm: FakeOpenAI) -> Iterator[lgdiff_servers.Server]:
    server = _needed(
        "LangGraph's server", lambda: lgdiff_servers.reference_server(llm.base_url).start()
    )
    yield server
    server.stop()


@pytest.fixture
def longtask(db_url: str, llm: FakeOpenAI) -> Iterator[lgdiff_servers.Server]:
    server = lgdiff_servers.longtask_server(db_url, llm.base_url, TOKEN).start()
    yield server
    out = server.stop()
    assert TOKEN not in out, "longtask serve printed the token"


@pytest.fixture(scope="module")
def reference_py(reference: lgdiff_servers.Server) -> list[tuple[str, Any]]:
    trace = lgdiff_drive.run(reference.url, TOKEN)
    _check_reference(trace)
    return trace


@pytest.fixture(scope="module")
def js_dir() -> Path:
    return _needed("the JS SDK (npm)", lgdiff_servers.js_sdk)  # type: ignore[no-any-return]


def _drive_js(
    js_dir: Path, url: str, script: Path = HERE / "lgdiff_drive.mjs"
) -> list[tuple[str, Any]]:
    env = {**os.environ, "NODE_PATH": str(js_dir / "node_modules")}
    done = subprocess.run(
        ["node", str(script), url, TOKEN],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=js_dir,  # node resolves the SDK from node_modules here
    )
    assert done.returncode == 0, f"the JS script failed:\n{done.stdout}\n{done.stderr}"
    return [(label, answer) for label, answer in json.loads(done.stdout)]


@pytest.fixture(scope="module")
def reference_js(reference: lgdiff_servers.Server, js_dir: Path) -> list[tuple[str, Any]]:
    trace = _drive_js(js_dir, reference.url)
    _check_reference(trace)
    return trace


def _check_reference(trace: list[tuple[str, Any]], *, chat: bool = True) -> None:
    """The script is ordinary LangGraph use: the reference server refuses none of it, but
    the calls made to be refused (``lgdiff_assistants.REFUSED``: a second create of one
    assistant, a deleted one's get; ``lgdiff_misc.REFUSED``: reads of what was deleted)."""
    meant = {*lgdiff_assistants.REFUSED, *lgdiff_misc.REFUSED, *lgdiff_more.REFUSED}
    refused = [
        (label, answer)
        for label, answer in trace
        if label not in meant
        and (
            (isinstance(answer, dict) and "__error__" in answer)
            or (lgdiff_shapes.is_stream(answer) and answer and answer[-1][0] == "__error__")
        )
    ]
    assert not refused, f"LangGraph's server refused part of the script: {refused}"
    if not chat:
        return  # the plain graphs' script (test_lg_plain_diff.py) makes none of the below
    answers = dict(trace)
    missing = [label for label in lgdiff_misc.LABELS if label not in answers]
    assert not missing, f"the script did not reach {missing}"
    # the thread's stream was joined, and read to its run's end
    last = answers["threads.join_stream replay"][-1]
    assert last[0] == "metadata" and last[1]["status"] == "run_done", last
    for label in lgdiff_misc.PY_LABELS:
        # a filtered history that finds something (an empty one would compare equal to any)
        assert answers.get(label, [None]), f"{label}: nothing found"


def _judge(
    sdk: str, ref: list[tuple[str, Any]], got: list[tuple[str, Any]], *, plain: bool = False
) -> None:
    keep = os.environ.get("LGDIFF_TRACES")  # a directory: keep both traces there, to read
    if keep:
        name = sdk.split()[0].lower()
        Path(keep).mkdir(parents=True, exist_ok=True)
        for who, trace in (("reference", ref), ("longtask", got)):
            (Path(keep) / f"{name}-{who}.json").write_text(json.dumps(trace, indent=1, default=str))
    diffs = diff_traces(ref, got)
    left, used = split(diffs, lgdiff_shapes.PLAIN_INTENDED if plain else INTENDED)
    allowed = sum(len(v) for v in used.values())
    print(f"{sdk}: {len(diffs)} differences, {allowed} intended, {len(left)} not")
    for intended, found in used.items():
        print(f"  intended ({len(found)}): {intended.reason}")
    assert not left, (
        f"{len(left)} differences from LangGraph's server through the {sdk} "
        "(reference first; add one to lgdiff_shapes.INTENDED, or PLAIN_INTENDED for plain "
        "graphs, only with its reason).\n"
        "By where and what:\n"
        + "\n".join(f"  {line}" for line in lgdiff_shapes.grouped(left))
        + "\nEach one:\n"
        + "\n".join(f"  {d}" for d in left)
    )


def test_python_sdk_sees_longtask_serve_as_langgraphs_server(
    reference_py: list[tuple[str, Any]], longtask: lgdiff_servers.Server
) -> None:
    _judge("Python SDK", reference_py, lgdiff_drive.run(longtask.url, TOKEN))


def test_js_sdk_sees_longtask_serve_as_langgraphs_server(
    reference_js: list[tuple[str, Any]], longtask: lgdiff_servers.Server, js_dir: Path
) -> None:
    _judge("JS SDK", reference_js, _drive_js(js_dir, longtask.url))


class _Receiver:
    """An HTTP server on 127.0.0.1 keeping the JSON bodies POSTed to it."""

    def __init__(self) -> None:
        got = self.got = queue.Queue[dict[str, Any]]()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                got.put(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _webhook_payload(url: str) -> dict[str, Any]:
    """Start a run with a webhook (it stops at the approval) and return what was POSTed."""
    receiver = _Receiver()
    try:
        lg = get_sync_client(url=url, api_key=TOKEN)
        thread = lg.threads.create()["thread_id"]
        run = lg.runs.create(thread, "chat", input=lgdiff_drive.CHAT, webhook=receiver.url)
        lg.runs.join(thread, run["run_id"])
        body = receiver.got.get(timeout=60)
        assert body["run_id"] == run["run_id"]
        return body
    finally:
        receiver.close()


def test_a_run_webhook_posts_what_langgraphs_server_posts(
    reference: lgdiff_servers.Server, longtask: lgdiff_servers.Server
) -> None:
    ref = _webhook_payload(reference.url)
    got = _webhook_payload(longtask.url)
    assert ref["status"] == got["status"] == "success"
    left, _ = split(diff_answer("runs webhook", ref, got), INTENDED)
    assert not left, "the webhook's payload differs:\n" + "\n".join(f"  {d}" for d in left)


# -- the comparison itself (no server)


def test_shapes_keep_kinds_and_types_not_values() -> None:
    a = {"type": "ai", "content": "hello", "id": "x1", "n": 1, "tags": ["a", "b"]}
    b = {"type": "ai", "content": "other", "id": "y2", "n": 7, "tags": ["c"]}
    assert shape(a) == shape(b)
    assert shape({**a, "type": "human"}) != shape(a)  # a kind is compared
    assert shape({**a, "n": None}) != shape(a)  # null is not a number
    # ids as keys, and repeats (tokens) collapse
    assert shape({"3f1e2a9c-0c1d-4a5b-9e8f-0123456789ab": 1}) == {"<id>": "number"}
    assert shape([{"c": "a"}, {"c": "b"}, {"c": "c"}]) == [{"c": "str"}]
    assert event_name("updates|answer:3f1e2a9c-0c1d-4a5b-9e8f-0123456789ab") == "updates|answer"


def test_differences_name_where_and_what() -> None:
    ref = {"values": {"messages": [{"type": "human"}], "answer": "x"}, "next": ["approve"]}
    got = {"values": {"answer": "x"}, "next": ["approve.ask"], "extra": 1}
    found = {str(d) for d in diff_answer("get_state", ref, got)}
    assert found == {
        "get_state at .values.messages: missing in longtask (reference: [{'type': 'human'}])",
        "get_state at .next: reference ['approve'], longtask ['approve.ask']",
        "get_state at .extra: extra in longtask ('number')",
    }
    refused = diff_answer("stream", [["metadata", {}]], {"__error__": 409, "detail": "no"})
    assert [d.text for d in refused] == ["reference answered; longtask refused 409 'no'"]


def test_streams_are_compared_by_part_kind_and_order() -> None:
    ref = [["metadata", {"run_id": "r"}], ["values", {"a": 1}], ["updates", {"n": {"a": 1}}]]
    got = [["metadata", {"run_id": "s"}], ["updates", {"n": {"a": 2}}], ["values", {"a": 1}]]
    (order,) = diff_answer("s", ref, got)
    assert order.path == "(order)"
    missing = diff_answer("s", ref, ref[:2])
    assert [d.path for d in missing] == ["[updates]"]
    assert diff_answer("s", ref, ref) == []


def test_differences_are_grouped_by_where_and_what() -> None:
    a = Difference("one", ".tasks[0].path", "missing in longtask")
    b = Difference("two", ".tasks[3].path", "missing in longtask")
    c = Difference("two", ".next", "other")
    assert lgdiff_shapes.grouped([c, a, b]) == [
        "2x .tasks[i].path: missing in longtask  (e.g. one)",
        "1x .next: other  (e.g. two)",
    ]


def test_intended_differences_allow_only_what_they_name() -> None:
    meta = Difference("threads.get", ".metadata.task_ref", "extra in longtask ('str')")
    other = Difference("threads.get", ".values.messages", "missing in longtask")
    left, used = split([meta, other], INTENDED)
    assert left == [other]
    assert sum(len(v) for v in used.values()) == 1
    assert all(i.reason.strip() for i in INTENDED), "each intended difference says why"
    assert Intended("runs.*", ".x", "r").allows(Difference("runs.get", ".x", ""))


def test_docs_list_the_intended_differences() -> None:
    readme = " ".join((ROOT / "docs" / "internals" / "server-differences.md").read_text().split())
    every = [*INTENDED, *lgdiff_shapes.PLAIN_INTENDED]
    missing = [i.reason for i in every if " ".join(i.reason.split()) not in readme]
    assert not missing, f"docs/internals/server-differences.md lacks: {missing}"
