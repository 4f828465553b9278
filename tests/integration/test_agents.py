"""Agent steps against every backend, through the real ``ChatOpenAI`` client talking to the
scripted OpenAI-compatible server of ``tests/fakes`` on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeOpenAI, Reply, by_conversation, by_turn

from longtask import (
    Budget,
    InvalidInput,
    LongTask,
    Runner,
    Stage,
    StepContext,
    StepFailed,
    function_step,
)
from longtask.model import Prompt, agent_step, fix_with

SECRET = "sk-test-SECRET-do-not-store-7f3a9c"
START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


class FakeTime:
    def __init__(self) -> None:
        self.t = START
        self.slept: list[float] = []

    def __call__(self) -> datetime:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 3))
        self.t += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> FakeTime:
    return FakeTime()


@pytest.fixture
def runner(db_url: str, clock: FakeTime) -> Iterator[Runner]:
    r = Runner(db_url, clock=clock, sleep=clock.sleep)
    yield r
    r.close()


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Start the fake server with ``llm(script)``; the env points ChatOpenAI at it."""
    servers: list[FakeOpenAI] = []

    def start(script: Any) -> FakeOpenAI:
        server = FakeOpenAI(script).start()
        servers.append(server)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        return server

    yield start
    for server in servers:
        server.stop()


def adder_task(tools: list[Any], **kw: Any) -> LongTask:
    prompt = Prompt(name="adder", version="3", template="Add {inputs[x]} and 3.")
    return LongTask(
        "sum",
        stages=[
            Stage("think", [agent_step("adder", prompt=prompt, tools=tools, **kw)]),
            Stage("after", [function_step(lambda ctx: ctx.result("adder").upper(), name="shout")]),
        ],
    )


def test_agent_with_a_tool_is_recorded(runner: Runner, llm: Any) -> None:
    added: list[tuple[int, int]] = []

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        added.append((a, b))
        return a + b

    server = llm(
        by_turn(
            [
                Reply.tool_calls([("add", {"a": 2, "b": 3})], usage=(100, 20)),
                Reply.text("The sum is 5", usage=(130, 10), model="gpt-4o-mini-2024-07-18"),
            ]
        )
    )
    thread = runner.start(adder_task([add]), {"x": 2}, thread_id="t-agent")
    assert runner.status(thread).status == "completed"
    assert runner.results(thread) == {"adder": "The sum is 5", "shout": "THE SUM IS 5"}
    assert added == [(2, 3)]
    assert server.requests[0].first_text() == "Add 2 and 3."
    assert server.requests[0].api_key_seen == SECRET
    calls = runner.events(thread, kinds=["model.call"])
    assert [e.data["call"] for e in calls] == [1, 2]
    first, second = (e.data for e in calls)
    assert (first["prompt"], first["prompt_version"]) == ("adder", "3")
    assert first["usage"] == {"input": 100, "output": 20, "total": 120}
    assert first["finish_reason"] == "tool_calls" and second["finish_reason"] == "stop"
    assert second["model_requested"] == "gpt-4o-mini"
    assert second["model"] == "gpt-4o-mini-2024-07-18"
    assert first["response_id"].startswith("chatcmpl-")
    assert first["cost"] == pytest.approx((100 * 0.15 + 20 * 0.60) / 1e6)
    kinds = [e.kind for e in runner.events(thread) if e.step == "adder"]
    assert kinds.index("agent.run.started") < kinds.index("agent.run.completed")
    budget = runner.budget(thread)
    assert budget is not None
    assert budget.used["tokens"] == 260 and budget.used["tool_calls"] == 1
    (tool,) = runner.effects(thread)
    assert (tool.name, tool.status, tool.result) == (
        "tool:add",
        "succeeded",
        {"content": "5", "status": "success"},
    )
    transcript = runner.transcript(thread, "adder")
    assert [m["type"] for m in transcript] == ["human", "ai", "tool", "ai"]


def test_rate_limit_waits_and_bad_request_fails(runner: Runner, llm: Any, clock: FakeTime) -> None:
    llm(
        by_conversation(
            {
                "Add 1": [
                    [Reply.error(429, "slow down", headers={"Retry-After": "2"}), Reply.text("4")]
                ],
                "Add 9": [Reply.error(400, "max_tokens is too large: 999999")],
            }
        )
    )
    thread = runner.start(adder_task([]), {"x": 1}, thread_id="t-429")
    assert runner.result(thread, "adder") == "4"
    assert clock.slept == [2.0]
    (retry,) = runner.events(thread, kinds=["step.retry"])
    assert retry.data["error_class"] == "rate_limited" and retry.data["model_call"] == 1
    with pytest.raises(StepFailed, match="max_tokens is too large: 999999"):
        runner.start(adder_task([]), {"x": 9}, thread_id="t-400")
    status = runner.status("t-400")
    assert status.status == "failed"
    assert status.error is not None and "max_tokens is too large" in status.error["message"]
    assert status.error["error_class"] == "invalid_input"


def test_over_budget_pauses_before_the_next_model_call(runner: Runner, llm: Any) -> None:
    def look(topic: str) -> str:
        """Look a topic up."""
        return f"notes on {topic}"

    server = llm(
        by_turn(
            [
                Reply.tool_calls([("look", {"topic": "a"})], usage=(100, 50)),
                Reply.tool_calls([("look", {"topic": "b"})], usage=(100, 50)),
                Reply.text("done", usage=(100, 50)),
            ]
        )
    )
    task = LongTask(
        "spend",
        stages=[Stage("s", [agent_step("research", prompt="Research.", tools=[look])])],
        budget=Budget(tokens=200),
    )
    thread = runner.start(task, thread_id="t-budget")
    status = runner.status(thread)
    assert status.status == "waiting_user"
    assert status.waiting[0]["reason"] == "budget exceeded: tokens 300 of 200"
    assert len(server.requests) == 2  # paused before the third call
    runner.raise_budget(thread, tokens=1000)
    runner.resume(thread, task=task)
    assert runner.result(thread, "research") == "done"
    # each of the three requests was sent once: the agent continued, it did not start over
    assert len(server.requests) == 3
    assert [r.turn for r in server.requests] == [0, 1, 2]


def test_tool_approval_is_bound_to_the_arguments(runner: Runner, llm: Any) -> None:
    deployed: list[str] = []

    def deploy(env: str) -> str:
        """Deploy to an environment."""
        deployed.append(env)
        return f"deployed to {env}"

    llm(by_turn([Reply.tool_calls([("deploy", {"env": "prod"})]), Reply.text("shipped")]))
    task = LongTask(
        "ship",
        stages=[
            Stage(
                "s",
                [
                    agent_step(
                        "release",
                        prompt="Ship it.",
                        tools=[deploy],
                        tool_approvals={"deploy": True},
                    )
                ],
            )
        ],
    )
    thread = runner.start(task, thread_id="t-deploy")
    assert runner.status(thread).status == "waiting_user"
    (pending,) = runner.pending(thread, task=task)
    assert pending.kind == "approval" and pending.step == "release"
    assert pending.request["plan"] == {"tool": "deploy", "args": {"env": "prod"}}
    assert deployed == []
    from longtask.model._decision import plan_hash

    other = plan_hash({"tool": "deploy", "args": {"env": "staging"}})
    with pytest.raises(InvalidInput, match="approves plan"):
        runner.approve(thread, "release", by="ops", plan_hash=other, task=task)
    assert runner.status(thread).status == "waiting_user"
    runner.approve(thread, "release", by="ops", plan_hash=pending.request["plan_hash"], task=task)
    assert runner.status(thread).status == "completed"
    assert deployed == ["prod"]
    assert runner.result(thread, "release") == "shipped"
    resolved = runner.events(thread, kinds=["approval.resolved"])
    assert [(e.data["tool"], e.data["by"]) for e in resolved] == [("deploy", "ops")]


def test_invalid_tool_input_goes_back_to_the_model(runner: Runner, llm: Any) -> None:
    def read(path: str) -> str:
        """Read a file."""
        if path.startswith("/"):
            raise InvalidInput("path must be relative to the repository")
        return f"contents of {path}"

    server = llm(
        by_turn(
            [
                Reply.tool_calls([("read", {"path": "/etc/passwd"})]),
                Reply.tool_calls([("read", {"path": "README.md"})]),
                Reply.text("read it"),
            ]
        )
    )
    task = LongTask("r", stages=[Stage("s", [agent_step("reader", prompt="Read.", tools=[read])])])
    runner.start(task, thread_id="t-read")
    assert runner.result("t-read", "reader") == "read it"
    tool_msgs = [m for m in server.requests[1].messages if m["role"] == "tool"]
    assert "path must be relative" in tool_msgs[0]["content"]


def test_fix_loop_runs_the_agent_until_the_tests_pass(
    runner: Runner, llm: Any, tmp_path: Path
) -> None:
    value = tmp_path / "value.txt"
    value.write_text("0")
    runs: list[int] = []

    def run_tests(ctx: StepContext) -> str:
        runs.append(int(value.read_text()))
        if int(value.read_text()) < 2:
            raise AssertionError(f"expected at least 2, got {value.read_text()}")
        return "passed"

    def edit(new_value: int) -> str:
        """Write the value file."""
        value.write_text(str(new_value))
        return "written"

    def fixer_script(request: Any) -> Reply:
        text = request.first_text()
        round_no = int(text.split("round ")[1].split(":")[0])
        if request.turn == 0:
            return Reply.tool_calls([("edit", {"new_value": round_no})])
        return Reply.text(f"set the value to {round_no}")

    llm(fixer_script)
    fixer = agent_step(
        "fix_tests",
        prompt=Prompt(name="fix", template="Fix round {round}: {failure}"),
        tools=[edit],
    )
    task = LongTask(
        "fixing",
        stages=[Stage("verify", [function_step(run_tests, on_failure=fix_with(fixer, 3))])],
    )
    thread = runner.start(task, thread_id="t-fix")
    assert runner.status(thread).status == "completed"
    assert runs == [0, 1, 2]
    rounds = runner.events(thread, kinds=["fix.round"])
    assert [e.data["round"] for e in rounds] == [1, 2]
    assert "expected at least 2, got 0" in rounds[0].data["failure"]
    (step,) = runner.status(thread).steps
    assert step.fix_rounds == 2
    agents = runner.events(thread, kinds=["agent.run.completed"])
    assert [e.step for e in agents] == ["fix_tests", "fix_tests"]
    # Every started attempt is the one that completes or fails, numbered on across rounds,
    # and the events after a fix round say which round they follow.
    kinds = ["step.started", "step.failed", "step.completed"]
    story = [
        (e.kind, e.step, e.attempt, (e.data or {}).get("fix_round"))
        for e in runner.events(thread, kinds=kinds)
    ]
    assert story == [
        ("step.started", "run_tests", 1, None),
        ("step.failed", "run_tests", 1, None),
        ("step.started", "fix_tests", 1, 1),
        ("step.completed", "fix_tests", 1, 1),
        ("step.started", "run_tests", 2, 1),
        ("step.failed", "run_tests", 2, None),
        ("step.started", "fix_tests", 1, 2),
        ("step.completed", "fix_tests", 1, 2),
        ("step.started", "run_tests", 3, 2),
        ("step.completed", "run_tests", 3, 2),
    ]


def test_a_model_factory_is_named_and_an_unpriced_model_costs_unknown(
    runner: Runner, llm: Any
) -> None:
    from langchain_openai import ChatOpenAI

    llm(by_turn([Reply.text("The sum is 5", usage=(100, 20), model="local-llama-3")]))
    task = adder_task([], model=lambda: ChatOpenAI(model="local-llama-3", max_retries=0))
    thread = runner.start(task, {"x": 2}, thread_id="t-factory")
    (call,) = runner.events(thread, kinds=["model.call"])
    assert (call.data["model_requested"], call.data["model"]) == ("local-llama-3", "local-llama-3")
    (started,) = runner.events(thread, kinds=["agent.run.started"])
    assert started.data["model"] == "local-llama-3"
    # No price for the model: unknown in both events, not 0 in one and null in the other.
    (done,) = runner.events(thread, kinds=["agent.run.completed"])
    assert call.data["cost"] is None and done.data["cost"] is None


def test_fix_loop_gives_up_after_max_rounds(runner: Runner, llm: Any) -> None:
    llm(by_turn([Reply.text("I tried")]))
    fixer = agent_step("fixer", prompt="Fix round {round}: {failure}")

    def always(ctx: StepContext) -> None:
        raise AssertionError("still red")

    task = LongTask(
        "hopeless",
        stages=[Stage("v", [function_step(always, name="check", on_failure=fix_with(fixer, 2))])],
    )
    with pytest.raises(StepFailed, match="still red"):
        runner.start(task, thread_id="t-hopeless")
    assert [e.data["round"] for e in runner.events("t-hopeless", kinds=["fix.round"])] == [1, 2]


def test_no_secret_is_stored(runner: Runner, llm: Any, db_url: str, tmp_path: Path) -> None:
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    llm(by_turn([Reply.tool_calls([("add", {"a": 1, "b": 2})]), Reply.text("3")]))
    runner.start(adder_task([add]), {"x": 1}, thread_id="t-secret")
    runner.events_writer.flush()
    assert SECRET not in _everything_stored(db_url)


def _everything_stored(db_url: str) -> str:
    """Every byte of the database, as text (SQLite: the files; PostgreSQL: every row)."""
    if db_url.startswith("sqlite"):
        path = Path(db_url.removeprefix("sqlite:///"))
        data = b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*") if p.is_file())
        return data.decode("latin-1")
    import psycopg

    out = []
    with psycopg.connect(db_url) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
        for (table,) in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):  # type: ignore[arg-type]
                out.append(
                    json.dumps(
                        row,
                        default=lambda v: (
                            bytes(v).decode("latin-1")
                            if isinstance(v, (bytes, memoryview))
                            else str(v)
                        ),
                    )
                )
    return "\n".join(out)


def test_timeouts_and_server_errors_are_retried(runner: Runner, llm: Any, clock: FakeTime) -> None:
    server = llm(
        by_conversation(
            {
                "Add 5": [[Reply.slow(Reply.text("late"), 5), Reply.text("8")]],
                "Add 6": [
                    [Reply.error(500, "upstream exploded", type_="server_error"), Reply.text("9")]
                ],
            }
        )
    )
    thread = runner.start(adder_task([], timeout=0.5), {"x": 5}, thread_id="t-slow")
    assert runner.result(thread, "adder") == "8"
    (retry,) = runner.events(thread, kinds=["step.retry"])
    assert retry.data["error_class"] == "transient" and "Timeout" in retry.data["error"]
    thread = runner.start(adder_task([]), {"x": 6}, thread_id="t-500")
    assert runner.result(thread, "adder") == "9"
    (retry,) = runner.events(thread, kinds=["step.retry"])
    assert (retry.data["error_class"], retry.data["status_code"]) == ("transient", 500)
    assert 1.0 <= clock.slept[-1] <= 1.1  # the default back-off of model calls, with jitter
    assert server.request_count(lambda r: "Add 6" in r.first_text()) == 2


def test_structured_response_format(runner: Runner, llm: Any) -> None:
    from pydantic import BaseModel

    class Verdict(BaseModel):
        verdict: str
        score: int

    server = llm(by_turn([Reply.text('{"verdict": "ship it", "score": 4}')]))
    task = LongTask(
        "judge",
        stages=[Stage("s", [agent_step("judge", prompt="Judge.", response_format=Verdict)])],
    )
    runner.start(task, thread_id="t-judge")
    assert runner.result("t-judge", "judge") == {"verdict": "ship it", "score": 4}
    assert "response_format" in server.requests[0].body or "tools" in server.requests[0].body


def test_a_prompt_naming_what_it_cannot_see_fails_clearly(runner: Runner, llm: Any) -> None:
    llm(by_turn([Reply.text("x")]))
    task = LongTask(
        "p",
        stages=[Stage("s", [agent_step("a", prompt="Use {report} and {inputs[x]}")])],
    )
    with pytest.raises(
        StepFailed, match=r"uses 'report', which it cannot see \(it can use: inputs"
    ):
        runner.start(task, {"x": 1}, thread_id="t-prompt")


def test_max_turns_ends_a_runaway_agent(runner: Runner, llm: Any) -> None:
    def ping() -> str:
        """Ping."""
        return "pong"

    server = llm(lambda request: Reply.tool_calls([("ping", {})]))
    task = LongTask(
        "loop",
        stages=[Stage("s", [agent_step("looper", prompt="Go.", tools=[ping], max_turns=3)])],
    )
    with pytest.raises(StepFailed, match="made 3 model calls \\(max_turns\\)"):
        runner.start(task, thread_id="t-loop")
    assert len(server.requests) == 3


def test_missing_api_key_pauses_for_a_person(
    runner: Runner, llm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm(by_turn([Reply.text("hello")]))
    monkeypatch.delenv("OPENAI_API_KEY")
    task = LongTask("k", stages=[Stage("s", [agent_step("greeter", prompt="Hi.")])])
    runner.start(task, thread_id="t-key")
    status = runner.status("t-key")
    assert status.status == "waiting_user"
    assert "needs OPENAI_API_KEY" in status.waiting[0]["reason"]
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    runner.retry("t-key", task=task)
    assert runner.result("t-key", "greeter") == "hello"


def test_tools_see_the_step_context(runner: Runner, llm: Any) -> None:
    from longtask import current_context

    def where() -> str:
        """Which repository the task works on."""
        return str(current_context().inputs["repo"])

    llm(by_turn([Reply.tool_calls([("where", {})]), Reply.text("ok")]))
    task = LongTask("ctx", stages=[Stage("s", [agent_step("a", prompt="Go.", tools=[where])])])
    runner.start(task, {"repo": "/srv/repo"}, thread_id="t-ctx")
    tool = [m for m in runner.transcript("t-ctx", "a") if m["type"] == "tool"]
    assert tool[0]["data"]["content"] == "/srv/repo"
