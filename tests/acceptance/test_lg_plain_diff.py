"""The differential test of plain LangGraph apps (issue 40): the two template-style apps of
``lgapps/`` (a ReAct agent with a tool; a graph with its own ``interrupt()``), unmodified,
served by LangGraph's own server (``langgraph-api``, in memory) and by
``longtask serve --config lgapps/langgraph.json``, driven by one script through the Python
SDK and RemoteGraph (``lgdiff_plain_drive.py``) and the JS SDK
(``lgdiff_plain_drive.mjs``): run, stream, pause, resume, state, history, and a second
message on a finished thread and a new input at a pause (``lgdiff_plain_turns``). Answers are
compared by shape as in ``test_lg_differential.py``; what differs on purpose is
``lgdiff_shapes.PLAIN_INTENDED``, each with its reason; anything else fails the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lgdiff_plain_drive
import lgdiff_servers
import pytest
from fakes import FakeOpenAI, Reply, Request
from test_lg_differential import _check_reference, _drive_js, _judge, _needed

HERE = Path(__file__).parent
TOKEN = "tok-alice-lgdiff"


def _script(request: Request) -> Reply:
    if "nested" in request.first_text():
        return Reply.text("The nested report says it will rain.")
    if request.turn == 0:
        return Reply.tool_calls([("search", {"query": "weather in Paris"})])
    return Reply.text("It is sunny in Paris.")


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(_script) as server:
        yield server


@pytest.fixture(scope="module", autouse=True)
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Where the drivers hold a run mid-way (``lgdiff_plain_nest``): both servers' graphs
    wait while this file exists."""
    path = tmp_path_factory.mktemp("hold") / "hold"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LGAPPS_HOLD", str(path))
        yield


@pytest.fixture(scope="module")
def reference(llm: FakeOpenAI, held: None) -> Iterator[lgdiff_servers.Server]:
    server = _needed(
        "LangGraph's server", lambda: lgdiff_servers.plain_reference_server(llm.base_url).start()
    )
    yield server
    server.stop()


@pytest.fixture
def longtask(db_url: str, llm: FakeOpenAI) -> Iterator[lgdiff_servers.Server]:
    server = lgdiff_servers.plain_longtask_server(db_url, llm.base_url, TOKEN).start()
    yield server
    out = server.stop()
    assert TOKEN not in out, "longtask serve printed the token"


@pytest.fixture(scope="module")
def js_dir() -> Path:
    return _needed("the JS SDK (npm)", lgdiff_servers.js_sdk)  # type: ignore[no-any-return]


def test_python_sdk_sees_a_served_plain_graph_as_langgraphs_server_does(
    reference: lgdiff_servers.Server, longtask: lgdiff_servers.Server
) -> None:
    ref = lgdiff_plain_drive.run(reference.url, TOKEN)
    _check_reference(ref, chat=False)
    _judge(
        "Python SDK (plain graphs)", ref, lgdiff_plain_drive.run(longtask.url, TOKEN), plain=True
    )


def test_js_sdk_sees_a_served_plain_graph_as_langgraphs_server_does(
    reference: lgdiff_servers.Server, longtask: lgdiff_servers.Server, js_dir: Path
) -> None:
    script = HERE / "lgdiff_plain_drive.mjs"
    ref: list[tuple[str, Any]] = _drive_js(js_dir, reference.url, script)
    _check_reference(ref, chat=False)
    _judge("JS SDK (plain graphs)", ref, _drive_js(js_dir, longtask.url, script), plain=True)
