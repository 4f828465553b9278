"""The servers of the differential and contract tests (``test_lg_differential.py``,
``test_lg_contract.py``): LangGraph's own server (``langgraph-api`` with the in-memory
runtime, what ``langgraph dev`` runs) from its own virtualenv, ``longtask serve``, and the
JS SDK from npm.

LangGraph's server pins its own versions, so it gets a virtualenv of its own, made by the
first test that needs it and kept under ``$LONGTASK_TEST_CACHE`` (default
``~/.cache/longtask-tests``) keyed by the pins below; schemathesis lives there too. The
JS SDK is installed with npm beside it, keyed the same way. Both come from the package
registries; nothing else is fetched. The server runs in memory (``DATABASE_URI=:memory:``,
``REDIS_URI=fake``, ``MIGRATIONS_PATH=__inmem``, as ``langgraph dev`` sets them through
``langgraph_api.cli.run_server``), with no license key, no tracing and no version check, so
it calls nothing outside 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).parent
#: versions checked together: langgraph-api 0.16.7 runs on the langgraph longtask uses
REF_PINS = (
    "langgraph-api==0.16.7",
    "langgraph-runtime-inmem==0.36.7",
    "langgraph==1.2.24",
    "langchain==1.5.2",
    "langchain-openai==1.8.1",
)
#: schemathesis wants a jsonschema-rs newer than langgraph-api allows: a virtualenv of its own
CONTRACT_PINS = ("schemathesis==4.32.5",)
JS_PINS = ("@langchain/langgraph-sdk@1.15.0",)
CACHE = Path(os.environ.get("LONGTASK_TEST_CACHE", Path.home() / ".cache" / "longtask-tests"))


def _key(pins: tuple[str, ...]) -> str:
    return hashlib.sha256("\n".join(pins).encode()).hexdigest()[:12]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One maker at a time (pytest-xdist runs the two tests at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run(args: list[str], what: str, timeout: float = 600, **kw: object) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def venv(name: str, pins: tuple[str, ...]) -> Path:
    """The Python of a virtualenv with ``pins`` installed, made on first use."""
    where = CACHE / f"{name}-{_key(pins)}"
    python = where / "bin" / "python"
    with _locked(CACHE / f"{where.name}.lock"):
        if not (where / "complete").exists():
            shutil.rmtree(where, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(where)], f"making the virtualenv {where}")
            _run(
                [str(python), "-m", "pip", "install", "-q", *pins],
                f"pip install {' '.join(pins)}",
            )
            (where / "complete").write_text("\n".join(pins) + "\n")
    return python


def ref_venv() -> Path:
    return venv("langgraph-api", REF_PINS)


def contract_venv() -> Path:
    return venv("schemathesis", CONTRACT_PINS)


def js_sdk() -> Path:
    """A directory whose node_modules holds the JS SDK, made on first use."""
    where = CACHE / f"js-sdk-{_key(JS_PINS)}"
    with _locked(CACHE / f"{where.name}.lock"):
        if not (where / "complete").exists():
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir(parents=True)
            (where / "package.json").write_text('{"name": "lgdiff", "private": true}\n')
            _run(
                ["npm", "install", "--no-audit", "--no-fund", "--silent", *JS_PINS],
                f"npm install {' '.join(JS_PINS)}",
                cwd=where,
            )
            (where / "complete").write_text("\n".join(JS_PINS) + "\n")
    return where


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A server process on 127.0.0.1 that answers ``GET /ok``."""

    def __init__(
        self, name: str, args: list[str], env: dict[str, str], port: int, cwd: Path = HERE
    ) -> None:
        self.name, self.args, self.env, self.port, self.cwd = name, args, env, port, cwd
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        # a file, not a pipe: a chatty server would block on a full pipe nobody reads
        self.log = tempfile.NamedTemporaryFile(prefix="lgdiff-server-", suffix=".log")  # noqa: SIM115

    def start(self, timeout: float = 120) -> Server:
        self.proc = subprocess.Popen(
            self.args, env=self.env, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.cwd
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.output()}"
                )
            try:
                if httpx.get(f"{self.url}/ok", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"{self.name} did not answer within {timeout} s:\n{self.output()}"
                )
            time.sleep(0.2)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> str:
        if self.proc is None:
            return ""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.cwd != HERE:
            shutil.rmtree(self.cwd, ignore_errors=True)
        return self.output()


def _quiet_env(llm_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH", "LANGCHAIN"))}
    env.update(
        OPENAI_API_KEY="sk-lgdiff",
        OPENAI_BASE_URL=llm_url,
        LANGSMITH_TRACING="false",
        LANGCHAIN_TRACING_V2="false",
        LANGGRAPH_NO_VERSION_CHECK="true",
        LANGGRAPH_CLOUD_LICENSE_KEY="",
        LANGSMITH_API_KEY="",
        PYTHONUNBUFFERED="1",
    )
    return env


def reference_server(llm_url: str, auth: str | None = None) -> Server:
    """LangGraph's own server with ``lgdiff_graph.py:graph`` as the graph ``chat`` (and
    ``auth``, a ``file.py:name`` of a ``langgraph_sdk.Auth``, as its auth handler)."""
    python = ref_venv()
    port = free_port()
    handler = f"auth={{'path': {auth!r}}}, " if auth else ""
    code = (
        "from langgraph_api.cli import run_server\n"
        f"run_server(host='127.0.0.1', port={port}, reload=False, open_browser=False,\n"
        f"           {handler}graphs={{'chat': {str(HERE / 'lgdiff_graph.py') + ':graph'!r}}},\n"
        # run webhooks to the test's receiver on 127.0.0.1 (refused by default, as by longtask)
        "           webhooks={'url': {'disable_loopback': False, 'require_https': False}},\n"
        "           disable_persistence=True)\n"
    )
    # its working directory gets a .langgraph_api folder: keep it out of the repository
    where = Path(tempfile.mkdtemp(prefix="lgdiff-ref-"))
    return Server(
        "LangGraph's server (langgraph-api)",
        [str(python), "-c", code],
        _quiet_env(llm_url),
        port,
        cwd=where,
    )


def longtask_server(db: str, llm_url: str, token: str, role: str = "user") -> Server:
    """``longtask serve`` with ``lgdiff_task.py:task`` (the task ``chat``), ``token`` being
    alice's, with ``role``."""
    port = free_port()
    env = _quiet_env(llm_url)
    env["LONGTASK_API_TOKENS"] = f"alice={token}:{role}"
    env["LONGTASK_WEBHOOK_ALLOW"] = "127.0.0.1"  # the test's webhook receiver
    env.pop("LONGTASK_API_TOKEN", None)
    args = [sys.executable, "-m", "longtask", "serve", "--port", str(port), "--db", db]
    args += ["--task", f"{HERE / 'lgdiff_task.py'}:task"]
    return Server("longtask serve", args, env, port)


#: the plain LangGraph apps of ``test_lg_plain_diff.py``, as LangChain's templates lay them out
APPS = HERE / "lgapps"


def plain_reference_server(llm_url: str) -> Server:
    """LangGraph's own server with the graphs of ``lgapps/langgraph.json``; the apps'
    ``src`` on the path, as ``pip install -e .`` makes it before ``langgraph dev``."""
    import json

    graphs = {
        name: str((APPS / ref.rpartition(":")[0]).resolve()) + ":" + ref.rpartition(":")[2]
        for name, ref in json.loads((APPS / "langgraph.json").read_text())["graphs"].items()
    }
    return graphs_reference_server(llm_url, graphs, APPS / "src")


def graphs_reference_server(
    llm_url: str, graphs: dict[str, str], path: Path | None = None
) -> Server:
    """LangGraph's own server with ``graphs`` (graph id: ``/abs/file.py:attr``), in
    memory; ``path`` on ``PYTHONPATH``."""
    python = ref_venv()
    port = free_port()
    code = (
        "from langgraph_api.cli import run_server\n"
        f"run_server(host='127.0.0.1', port={port}, reload=False, open_browser=False,\n"
        f"           graphs={graphs!r}, disable_persistence=True)\n"
    )
    env = _quiet_env(llm_url)
    if path is not None:
        env["PYTHONPATH"] = str(path)
    where = Path(tempfile.mkdtemp(prefix="lgdiff-plain-ref-"))
    return Server("LangGraph's server (langgraph-api)", [str(python), "-c", code], env, port, where)


def plain_longtask_server(db: str, llm_url: str, token: str) -> Server:
    """``longtask serve --config lgapps/langgraph.json``, unchanged apps."""
    return config_longtask_server(db, llm_url, token, APPS / "langgraph.json")


def config_longtask_server(db: str, llm_url: str, token: str, config: Path, *extra: str) -> Server:
    """``longtask serve --config CONFIG`` (a langgraph.json) with alice's ``token``."""
    port = free_port()
    env = _quiet_env(llm_url)
    env["LONGTASK_API_TOKENS"] = f"alice={token}"
    env.pop("LONGTASK_API_TOKEN", None)
    args = [sys.executable, "-m", "longtask", "serve", "--port", str(port), "--db", db]
    args += ["--config", str(config), *extra]
    return Server("longtask serve", args, env, port)


def longtask_auth_server(db: str, llm_url: str, auth: str, where: Path) -> Server:
    """``longtask serve`` with the task ``chat`` and ``auth`` as its auth handler, given
    in a langgraph.json-style file (``{"tasks": ..., "auth": {"path": ...}}``) in
    ``where``; no token."""
    import json

    port = free_port()
    env = _quiet_env(llm_url)
    for name in ("LONGTASK_API_TOKENS", "LONGTASK_API_TOKEN"):
        env.pop(name, None)
    config = where / "longtask.json"
    tasks = {"chat": f"{HERE / 'lgdiff_task.py'}:task"}
    config.write_text(json.dumps({"tasks": tasks, "auth": {"path": auth}}))
    args = [sys.executable, "-m", "longtask", "serve", "--port", str(port), "--db", db]
    args += ["--config", str(config)]
    return Server("longtask serve (auth handler)", args, env, port)


@contextlib.contextmanager
def running_worker(
    db: str, env: dict[str, str], cwd: Path | None = None, *extra: str
) -> Iterator[subprocess.Popen[str]]:
    """A ``longtask worker`` process on ``db`` (with the options ``extra``) while the block
    runs, stopped after it as a deploy stops one: SIGTERM, then SIGKILL after 20 s."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "longtask", "worker", "--db", db, *extra],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield worker
    finally:
        worker.terminate()
        try:
            worker.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()


async def retry_cut_off_call(
    lg: Any, tid: str, graph: str, tool: str, args: dict[str, Any], timeout: float = 120
) -> None:
    """After a kill in a served graph's tool call, wait for the thread's pause on that call
    (the tool carries no mark, so longtask cannot know whether it happened and asks), check
    that the pause shows the call as Agent Inbox shows it, answer Agent Inbox's "accept"
    (call it again) through the SDK, and wait until the thread is idle again."""
    deadline = time.monotonic() + timeout
    while (status := (await lg.threads.get(tid))["status"]) != "interrupted":
        assert status != "error", f"the thread failed instead of pausing: {status}"
        assert time.monotonic() < deadline, f"the cut-off {tool} call did not pause ({status})"
        await asyncio.sleep(0.1)
    state = await lg.threads.get_state(tid)
    (pause,) = state["interrupts"]
    request = pause["value"]
    assert request["name"] == f"tool:{tool}", request
    call = {"tool": tool, "args": args, "tool_call_id": request["tool_call_id"]}
    assert request["tool_call_id"] and request["args"] == call, request
    shown = request["action_request"]
    assert shown == {"action": request["name"], "args": {**call, "key": request["key"]}}, shown
    await lg.runs.create(tid, graph, command={"resume": [{"type": "accept"}]})
    while (status := (await lg.threads.get(tid))["status"]) != "idle":
        assert status != "error", "the thread failed after the call was retried"
        assert time.monotonic() < deadline, f"the retried {tool} call did not finish ({status})"
        await asyncio.sleep(0.1)
