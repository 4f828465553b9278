"""Runner.stream/astream, the async twins of start/resume/approve, config= for tracers, the
input schema, and OpenTelemetry spans, on both backends. Agent steps go through the real
ChatOpenAI client to the scripted server of tests/fakes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from fakes import FakeOpenAI, Reply
from langchain_core.callbacks import BaseCallbackHandler
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from longtask import (
    Command,
    InvalidInput,
    LongTask,
    Runner,
    Stage,
    StepContext,
    ThreadNotFound,
    approval,
    function_step,
)
from longtask.model import Prompt, agent_step


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    def reply(request: Any) -> Reply:
        # every conversation: one tool call, then the answer
        if any(m.get("role") == "tool" for m in request.messages):
            return Reply.text("The sum is 5")
        return Reply.tool_calls([("add", {"a": 2, "b": 3})])

    with FakeOpenAI(reply) as fake:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        yield fake


def measured(ctx: StepContext) -> int:
    ctx.progress(1, 1, "measured")
    return 1


TASK = LongTask(
    "streams_task",
    stages=[
        Stage("one", [function_step(measured, name="a"), function_step(lambda c: 2, name="b")]),
        Stage(
            "think",
            [agent_step("adder", prompt=Prompt(name="p", template="Add 2 and 3."), tools=[add])],
        ),
    ],
)

GATED = LongTask(
    "streams_gated",
    stages=[
        Stage("prepare", [function_step(lambda c: "built", name="build")]),
        Stage("gate", [approval("ok")]),
        Stage("ship", [function_step(lambda c: "shipped", name="publish")]),
    ],
)


def test_stream_yields_updates_and_custom_parts(runner: Runner, server: FakeOpenAI) -> None:
    parts = list(runner.stream(TASK, thread_id="s-1", stream_mode=["updates", "custom"]))
    modes = {mode for mode, _ in parts}
    assert modes == {"updates", "custom"}
    updated = {name for mode, chunk in parts if mode == "updates" for name in chunk}
    assert {"a", "b", "adder"} <= updated
    custom = [chunk for mode, chunk in parts if mode == "custom"]
    progress = [c for c in custom if c["longtask"] == "step.progress"]
    assert progress and progress[0]["step"] == "a" and progress[0]["stage"] == "one"
    assert progress[0]["data"]["message"] == "measured"
    calls = [c for c in custom if c["longtask"] == "model.call"]
    assert [c["data"]["call"] for c in calls] == [1, 2]
    assert all(c["step"] == "adder" and c["attempt"] == 1 for c in calls)
    # the run is the Runner's: status, events and results as after start()
    assert runner.status("s-1").status == "completed"
    assert runner.result("s-1", "adder") == "The sum is 5"
    kinds = [e.kind for e in runner.events("s-1")]
    assert kinds[0] == "longtask.started" and kinds[-1] == "longtask.completed"


def test_stream_shapes_follow_graph_stream(runner: Runner) -> None:
    # one mode: bare chunks; subgraphs: (namespace, chunk)
    chunks = list(runner.stream(GATED, thread_id="s-2", stream_mode="updates"))
    assert all(isinstance(c, dict) for c in chunks)
    assert any("__interrupt__" in c for c in chunks)
    assert runner.status("s-2").status == "waiting_user"
    pending = runner.pending("s-2")[0]
    answer = {"approved": True, "by": "alice", "plan_hash": pending.request["plan_hash"]}
    values = list(
        runner.stream(
            thread_id="s-2",
            command=Command(resume={pending.interrupt_id: answer}),
            stream_mode="values",
            subgraphs=True,
        )
    )
    assert values and all(ns == () for ns, _ in values)
    assert "out.publish" in values[-1][1]
    assert runner.status("s-2").status == "completed"


def test_stream_refuses_bad_arguments_before_storing(runner: Runner) -> None:
    with pytest.raises(InvalidInput, match="stream_mode 'everything'"):
        runner.stream(GATED, thread_id="s-3", stream_mode="everything")
    with pytest.raises(InvalidInput, match="'checkpoint_during'"):
        runner.start(GATED, thread_id="s-3", config={"checkpoint_during": True})  # type: ignore[typeddict-unknown-key]
    with pytest.raises(InvalidInput, match="'thread_id'"):
        runner.start(GATED, thread_id="s-3", config={"configurable": {"thread_id": "x"}})
    with pytest.raises(ThreadNotFound):
        runner.status("s-3")


def test_a_stream_left_early_stops_the_run_and_resume_continues(runner: Runner) -> None:
    parts = runner.stream(GATED, thread_id="s-4")
    first = next(parts)
    assert "build" in first
    parts.close()  # type: ignore[attr-defined]
    # the lock is released: another call can take the thread and go on
    assert runner.status("s-4").active is False
    runner.resume("s-4")
    assert runner.status("s-4").status == "waiting_user"


def test_async_twins(runner: Runner, server: FakeOpenAI) -> None:
    async def scenario() -> list[Any]:
        parts = [p async for p in runner.astream(TASK, thread_id="a-1", stream_mode="custom")]
        await runner.astart(GATED, thread_id="a-2")
        await runner.aapprove("a-2", by="alice")
        await runner.astart(GATED, thread_id="a-3")
        pending = runner.pending("a-3")[0]
        await runner.aresume(
            "a-3",
            Command(
                resume={
                    pending.interrupt_id: {
                        "approved": True,
                        "by": "bob",
                        "plan_hash": pending.request["plan_hash"],
                    }
                }
            ),
        )
        return parts

    parts = asyncio.run(scenario())
    assert any(p["longtask"] == "model.call" for p in parts)
    assert runner.status("a-1").status == "completed"
    assert runner.status("a-2").status == "completed"
    assert runner.status("a-3").status == "completed"


def test_astream_raises_the_runs_error(runner: Runner) -> None:
    def boom(ctx: StepContext) -> None:
        raise ValueError("no disk")

    failing = LongTask("streams_failing", stages=[Stage("s", [function_step(boom, name="x")])])

    async def scenario() -> None:
        async for _ in runner.astream(failing, thread_id="a-4"):
            pass

    with pytest.raises(Exception, match="no disk"):
        asyncio.run(scenario())
    assert runner.status("a-4").status == "failed"


class Chains(BaseCallbackHandler):
    """What LangChain tells a tracer: chain starts with their parents, tags and metadata."""

    def __init__(self) -> None:
        self.starts: list[dict[str, Any]] = []

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.starts.append(
            {
                "run_id": run_id,
                "parent": parent_run_id,
                "name": kwargs.get("name"),
                "tags": tags or [],
                "metadata": metadata or {},
            }
        )


def test_config_callbacks_see_each_run_as_one_tree(runner: Runner) -> None:
    chains = Chains()
    config: dict[str, Any] = {
        "callbacks": [chains],
        "tags": ["nightly"],
        "metadata": {"ticket": "T-7"},
        "run_name": "release",
    }
    runner.start(GATED, thread_id="c-1", config=config)
    runner.approve("c-1", by="alice", config=config)
    roots = [s for s in chains.starts if s["parent"] is None]
    # one root per run (start, then approve), under the given name, tags and metadata
    assert [r["name"] for r in roots] == ["release", "release"]
    for root in roots:
        assert "nightly" in root["tags"]
        assert root["metadata"]["ticket"] == "T-7"
        assert root["metadata"]["thread_id"] == "c-1"
    names = {s["name"] for s in chains.starts}
    assert {"build", "publish"} <= names
    # every chain is under one of the two roots
    parent = {s["run_id"]: s["parent"] for s in chains.starts}

    def root_of(run_id: UUID) -> UUID:
        while parent.get(run_id) is not None:
            run_id = parent[run_id]  # type: ignore[assignment]
        return run_id

    assert {root_of(s["run_id"]) for s in chains.starts} == {r["run_id"] for r in roots}
    assert runner.status("c-1").status == "completed"


def test_input_schema(runner: Runner) -> None:
    schema = runner.graph(GATED).get_input_jsonschema()
    assert "out.build" in schema["properties"]


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    # The global provider can be set once per process.
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    spans = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return spans


def test_opentelemetry_one_trace_per_run(
    runner: Runner, server: FakeOpenAI, exporter: InMemorySpanExporter
) -> None:
    exporter.clear()
    runner.start(TASK, thread_id="o-1")
    runner.start(GATED, thread_id="o-2")
    runner.approve("o-2", by="alice")
    spans: list[ReadableSpan] = [
        s for s in exporter.get_finished_spans() if s.name.startswith("longtask.")
    ]
    traces: dict[int, list[ReadableSpan]] = {}
    for s in spans:
        traces.setdefault(s.context.trace_id, []).append(s)  # type: ignore[union-attr]
    assert len(traces) == 3  # o-1's run, o-2's first run, o-2's run after the approval
    by_id = {s.context.span_id: s for s in spans}  # type: ignore[union-attr]
    for tree in traces.values():
        roots = [s for s in tree if s.parent is None]
        assert [r.name for r in roots] == ["longtask.run"]
        for s in tree:  # every span hangs under the root, through spans of the tree
            while s.parent is not None:
                s = by_id[s.parent.span_id]
            assert s is roots[0]
    o1 = next(t for t in traces.values() if t[0].attributes["longtask.thread_id"] == "o-1")  # type: ignore[index]
    steps = {s.attributes["longtask.step"]: s for s in o1 if s.name == "longtask.step"}  # type: ignore[index]
    assert set(steps) == {"a", "b", "adder"}
    assert steps["a"].attributes["longtask.stage"] == "one"  # type: ignore[index]
    assert steps["a"].attributes["longtask.attempt"] == 1  # type: ignore[index]
    calls = [s for s in o1 if s.name == "longtask.model_call"]
    assert len(calls) == 2
    for call in calls:
        assert call.attributes["longtask.step"] == "adder"  # type: ignore[index]
        assert call.attributes["longtask.attempt"] == 1  # type: ignore[index]
        assert call.parent.span_id == steps["adder"].context.span_id  # type: ignore[union-attr]
    tools = [s for s in o1 if s.name == "longtask.tool_call"]
    assert [t.attributes["longtask.tool"] for t in tools] == ["add"]  # type: ignore[index]
    pauses = [s for s in spans if s.name == "longtask.pause"]
    assert pauses and pauses[0].attributes["longtask.step"] == "ok"  # type: ignore[index]
    assert pauses[0].attributes["longtask.paused"] is True  # type: ignore[index]
    runs = sorted(
        r.attributes["longtask.run"]  # type: ignore[index]
        for r in spans
        if r.name == "longtask.run" and r.attributes["longtask.thread_id"] == "o-2"  # type: ignore[index]
    )
    assert runs == [1, 2]


def test_opentelemetry_trace_goes_into_worker_jobs(
    pg_url: str, exporter: InMemorySpanExporter
) -> None:
    from longtask.runtime._queue import serve_thread

    exporter.clear()
    with Runner(pg_url, worker="w-trace") as worker:
        worker.engine.load = lambda rec: GATED  # type: ignore[method-assign]
        thread = worker.submit(GATED, thread_id="w-1", task_ref="x:y")
        serve_thread(worker, thread)  # the worker's job runs it to the approval
        with Runner(pg_url) as caller:
            tracer = trace.get_tracer("test")
            with tracer.start_as_current_span("ops approves") as approving:
                caller.approve(thread, by="ops", task=GATED)  # queued, not run here
        assert serve_thread(worker, thread) == "continued"
        assert worker.status(thread).status == "completed"
    runs = [s for s in exporter.get_finished_spans() if s.name == "longtask.run"]
    assert len(runs) == 2
    first, second = sorted(runs, key=lambda s: s.attributes["longtask.run"])  # type: ignore[index]
    assert first.parent is None  # submitted with no trace around it
    # the run after the approval continues the approver's trace
    assert second.context.trace_id == approving.get_span_context().trace_id  # type: ignore[union-attr]
    assert second.parent.span_id == approving.get_span_context().span_id  # type: ignore[union-attr]


def test_astream_events_one_tree_per_run(runner: Runner) -> None:
    async def events(**kwargs: Any) -> list[Any]:
        return [e async for e in runner.astream_events(**kwargs)]

    first = asyncio.run(events(task=GATED, thread_id="e-1", config={"tags": ["nightly"]}))
    assert runner.status("e-1").status == "waiting_user"
    pending = runner.pending("e-1")[0]
    answer = {"approved": True, "by": "alice", "plan_hash": pending.request["plan_hash"]}
    second = asyncio.run(
        events(thread_id="e-1", command=Command(resume={pending.interrupt_id: answer}))
    )
    assert runner.status("e-1").status == "completed"
    for run, step in ((first, "build"), (second, "publish")):
        roots = [e for e in run if not e["parent_ids"]]
        assert {e["name"] for e in roots} == {"longtask"}
        root_id = roots[0]["run_id"]
        assert all(e["run_id"] == root_id or e["parent_ids"][0] == root_id for e in run)
        assert any(e["event"] == "on_chain_start" and e["name"] == step for e in run)
    assert "nightly" in first[0]["tags"]


def test_without_opentelemetry_nothing_changes(tmp_path: Any) -> None:
    # A process where opentelemetry cannot be imported: --help does not try, runs work.
    code = f"""
import sys
sys.modules["opentelemetry"] = None  # import fails, as without the otel extra
from typer.testing import CliRunner
from longtask.cli import app
assert CliRunner().invoke(app, ["--help"]).exit_code == 0
from longtask import LongTask, Runner, Stage, function_step
task = LongTask("plain", stages=[Stage("s", [function_step(lambda c: 1, name="a")])])
with Runner("sqlite:///{tmp_path / "plain.db"}") as runner:
    runner.start(task, thread_id="p-1")
    assert runner.status("p-1").status == "completed"
    assert list(runner.stream(task, thread_id="p-2", stream_mode="custom"))
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_help_does_not_import_opentelemetry() -> None:
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom longtask.cli import app\n"
        "CliRunner().invoke(app, ['--help'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


def test_spans_start_once_a_tracer_provider_is_set(tmp_path: Any) -> None:
    # With the API installed but no provider (the otel extra, not configured), no span is
    # made at all; a provider set later, after runs, is followed from its first run.
    code = f"""
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from longtask import LongTask, Runner, Stage, function_step
from longtask.steps._tracing import tracer
task = LongTask("plain", stages=[Stage("s", [function_step(lambda c: 1, name="a")])])
with Runner("sqlite:///{tmp_path / "spans.db"}") as runner:
    assert tracer() is None
    runner.start(task, thread_id="before")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    assert tracer() is not None
    runner.start(task, thread_id="after")
names = sorted({{s.name for s in exporter.get_finished_spans()}})
threads = {{s.attributes.get("longtask.thread_id") for s in exporter.get_finished_spans()}}
print(names, sorted(t for t in threads if t))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['longtask.run', 'longtask.step'] ['after']"
