"""Every outside write passes one gate (issue 39): every door × every kind of target × every
thread state, on both backends.

The doors, targets and states are generated, not listed by hand where the code can say them:
the step kinds come from the model (a new kind fails ``test_the_task_has_every_step_kind``
until the task here has one), the gate's doors from the package's source (a new ``through``
door fails ``test_every_door_of_the_gate_is_tried``, and a graph write outside any door fails
``test_no_graph_write_goes_around_the_gate``), the targets from the task's steps and pauses.

For every combination the expectation comes from an oracle written here from the rule (not
from the gate's code), and the test checks: no step behind an unanswered pause runs; no
pause's result changes; an accepted write leaves exactly one ``manual.update`` event; a
refused one leaves every row of the database as it was; and the thread can still be answered
and completed afterwards.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import sqlite3
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeOpenAI, Reply
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, StateUpdate
from serve_access import AdminClient
from starlette.testclient import TestClient
from typing_extensions import TypedDict

from longtask import (
    LongTask,
    LongTaskError,
    Retry,
    Runner,
    Stage,
    StepContext,
    StepFailed,
    approval,
    function_step,
    graph_step,
    map_step,
    subtask_step,
    wait_for,
)
from longtask.model import PauseStep, Prompt, agent_step
from longtask.model._steps import Step
from longtask.serve import create_app
from longtask.serve._registry import Registered, Registry

ROOT = Path(__file__).resolve().parents[2]
TOKENS = {"tok-alice": "alice"}
ALICE = {"X-Api-Key": "tok-alice"}

#: bodies run, per thread and step (a map step counts its items)
RAN: dict[str, Counter[str]] = defaultdict(Counter)
#: threads whose first step fails
FAIL: set[str] = set()
#: threads whose ``after_ok`` step blocks until its event is set (a running thread)
BLOCK: dict[str, threading.Event] = {}
STARTED: dict[str, threading.Event] = {}


@function_step(retry=Retry(max_attempts=1))
def prep(ctx: StepContext) -> dict[str, int]:
    RAN[ctx.thread_id]["prep"] += 1
    if ctx.thread_id in FAIL:
        raise ValueError("prep broke")
    return {"version": 1}


def _double(ctx: StepContext, item: int) -> int:
    RAN[ctx.thread_id]["double"] += 1
    return item * 2


@function_step
def after_ok(ctx: StepContext) -> str:
    RAN[ctx.thread_id]["after_ok"] += 1
    if ctx.thread_id in BLOCK:
        STARTED[ctx.thread_id].set()
        BLOCK[ctx.thread_id].wait(60)
    return "built"


@function_step
def ship(ctx: StepContext) -> str:
    RAN[ctx.thread_id]["ship"] += 1
    return "shipped"


@function_step
def delegated_work(ctx: StepContext) -> str:
    return "done by a child"


#: a sub-task step's child: its own thread, which the parent waits for
CHILD = LongTask("gated_child", stages=[Stage("work", [delegated_work])])


class Count(TypedDict, total=False):
    n: int


def _count(state: Count) -> dict[str, int]:
    return {"n": state.get("n", 0) + 1}


_counter: StateGraph[Any, Any, Any, Any] = StateGraph(Count)
_counter.add_node("count", _count)
_counter.add_edge(START, "count")
_counter.add_edge("count", END)


TASK = LongTask(
    "gated",
    stages=[
        Stage(
            "one",
            [
                prep,
                map_step(_double, over=lambda ctx: [1, 2], name="double"),
                agent_step("think", prompt=Prompt(name="p", template="Think.")),
                graph_step("counted", _counter, input=lambda ctx: {"n": 1}),
                subtask_step("delegated", CHILD),
            ],
        ),
        Stage("two", [approval("ok", plan=lambda ctx: ctx.result("prep"), approvers=["alice"])]),
        Stage("three", [after_ok]),
        Stage("four", [wait_for("ci")]),
        Stage("five", [ship]),
    ],
)
PAUSES = [n for n, s in TASK.steps.items() if isinstance(s, PauseStep)]
STATES = ["running", "paused_approval", "paused_wait", "failed", "completed", "cancelled"]
#: the pauses answered in each state (the rest have no answer)
ANSWERED = {
    "running": {"ok"},
    "paused_approval": set(),
    "paused_wait": {"ok"},
    "failed": set(),
    "completed": {"ok", "ci"},
    "cancelled": set(),
}


def _kinds() -> set[str]:
    out: set[str] = set()
    todo: list[type] = [Step]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        field = getattr(cls, "model_fields", {}).get("kind")
        if field is not None and isinstance(field.default, str):
            out.add(field.default)
    return out


def test_the_task_has_every_step_kind() -> None:
    assert {s.kind for s in TASK.steps.values()} == _kinds()


# -- the oracle: what the rule says, from the task's shape ----------------------------------


#: sub-task steps still waiting for their children in each state: where ``prep`` fails, the
#: run stops beside ``delegated``'s pause, before its child has run to continue it
WAITING_SUBTASKS = {s: {"delegated"} if s == "failed" else set() for s in STATES}


def guarded(state: str, step: str) -> bool:
    """Whether an unanswered pause guards ``step`` (it is one, or comes after one)."""
    unanswered = (set(PAUSES) - ANSWERED[state]) | WAITING_SUBTASKS[state]
    return step in unanswered or bool(unanswered & TASK.layout[step].ancestors)


@dataclass(frozen=True)
class Target:
    name: str
    values: dict[str, Any]
    as_node: str | None = None
    #: the step whose result it sets, if it is one the rule may allow
    step: str | None = None
    inputs: bool = False

    def allowed(self, state: str, door: Door) -> bool:
        if door.around or state in ("running", "cancelled"):
            return False
        if state == "completed" and not door.forks:
            return False
        if self.inputs:
            return state == "failed"  # no pause reached yet
        if self.step is None:
            return False
        kind = TASK.steps[self.step]
        return not isinstance(kind, PauseStep) and not guarded(state, self.step)


def targets(door: Door, thread: str) -> list[Target]:
    out = [Target(f"result:{s}", {s: {"forged": s}}, step=s) for s in TASK.steps]
    out += [Target(f"request:{p}", {f"pause.{p}": {"plan": "x"}}) for p in PAUSES]
    out += [Target(f"internal:{c}", {c: 1}) for c in ("branch:to:ship", "fix.prep", "__root__")]
    out += [Target("unknown", {"nope": 1})]
    forged = {
        "blob": {"$longtask": "blob", "digest": "0" * 64, "size": 5},
        "model": {"$longtask": "model", "model": "nowhere.at.all:Nothing", "value": {}},
        "map": {"$longtask": "map", "thread": "other", "step": "double", "digest": "0" * 40},
        "skipped": {"$longtask": "skipped", "reason": "forged"},
    }
    out += [Target(f"forged:{k}", {"prep": v}) for k, v in forged.items()]
    out += [Target("inputs", {"inputs": {"changed": True}}, inputs=True)]
    if door.as_node:
        nodes = ["ok", "ok.ask", "ok.request", "ci", "ship", "__end__", "__copy__"]
        out += [Target(f"as_node:{n}", {"prep": {"v": 2}}, as_node=n) for n in nodes]
    return out


# -- the doors ------------------------------------------------------------------------------


@dataclass
class World:
    runner: Runner
    url: str
    client: TestClient


@dataclass(frozen=True)
class Door:
    name: str
    #: the gate's name for it (what ``through`` says, or the default)
    gate: str
    write: Callable[[World, str, Target], None]
    as_node: bool = False
    forks: bool = False
    #: a way around every door (refused whatever it writes)
    around: bool = False


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def _head(world: World, thread: str) -> str:
    return str(
        world.runner.graph(TASK).get_state(_config(thread)).config["configurable"]["checkpoint_id"]
    )


def _update_state(world: World, thread: str, t: Target) -> None:
    world.runner.graph(TASK).update_state(_config(thread), t.values, as_node=t.as_node)


def _aupdate_state(world: World, thread: str, t: Target) -> None:
    graph = world.runner.graph(TASK)
    asyncio.run(graph.aupdate_state(_config(thread), t.values, as_node=t.as_node))


def _bulk(world: World, thread: str, t: Target) -> None:
    graph = world.runner.graph(TASK)
    graph.bulk_update_state(_config(thread), [[StateUpdate(t.values, t.as_node)]])


def _runner_resume(world: World, thread: str, t: Target) -> None:
    world.runner.resume(thread, Command(update=t.values), task=TASK, by="alice")


class Refused(Exception):
    pass


def _cli(world: World, *args: str) -> None:
    from longtask.cli import main

    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main([*args, "--db", world.url])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    if code not in (0, 3):
        raise Refused(f"exit {code}: {err.getvalue()}{out.getvalue()}")


def _cli_resume(world: World, thread: str, t: Target) -> None:
    _cli(world, "resume", thread, "--update", json.dumps(t.values), "--by", "alice")


def _fork(world: World, thread: str, t: Target) -> None:
    update = {k: v for k, v in t.values.items() if k != "inputs"}
    inputs = t.values.get("inputs")
    world.runner.fork(thread, _head(world, thread), update=update or None, inputs=inputs, task=TASK)


def _cli_fork(world: World, thread: str, t: Target) -> None:
    sets = [a for k, v in t.values.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    _cli(world, "fork", thread, _head(world, thread), *sets, "--by", "alice")


def _http(world: World, method: str, path: str, body: Any) -> None:
    answer = world.client.request(method, path, json=body, headers=ALICE)
    if answer.status_code >= 400:
        if answer.status_code >= 500:
            pytest.fail(f"{path} answered {answer.status_code}: {answer.text}")
        raise Refused(f"{answer.status_code}: {answer.text}")


def _server_state(world: World, thread: str, t: Target) -> None:
    body: dict[str, Any] = {"values": t.values}
    if t.as_node is not None:
        body["as_node"] = t.as_node
    _http(world, "POST", f"/threads/{thread}/state", body)


def _server_command(world: World, thread: str, t: Target) -> None:
    body = {"assistant_id": "gated", "command": {"update": t.values}}
    _http(world, "POST", f"/threads/{thread}/runs/wait", body)


def _invoke_command(world: World, thread: str, t: Target) -> None:
    world.runner.graph(TASK).invoke(Command(update=_channels(t.values)), _config(thread))


def _channels(values: dict[str, Any]) -> dict[str, Any]:
    names = {s: f"out.{s}" for s in TASK.steps} | {"inputs": "lt.inputs"}
    return {names.get(k, k): v for k, v in values.items()}


DOORS = [
    Door("update_state", "update_state", _update_state, as_node=True),
    Door("aupdate_state", "update_state", _aupdate_state, as_node=True),
    Door("bulk_update_state", "update_state", _bulk, as_node=True),
    Door("Runner.resume", "command", _runner_resume),
    Door("cli resume --update", "command", _cli_resume),
    Door("Runner.fork", "fork", _fork, forks=True),
    Door("cli fork --set", "fork", _cli_fork, forks=True),
    Door("POST /threads/T/state", "server.state", _server_state, as_node=True),
    Door("runs with command.update", "command", _server_command),
    Door("graph.invoke(Command(update))", "", _invoke_command, around=True),
]


def _package_doors() -> tuple[set[str], list[str]]:
    """The doors the package names (``through("...")``, ``door="..."``), and the calls of a
    graph's state writes that are inside no door (nor a trusted control)."""
    names = {"update_state"}  # the default: a caller of the compiled graph itself
    loose: list[str] = []
    writes = {"update_state", "aupdate_state", "bulk_update_state", "abulk_update_state"}
    for path in sorted((ROOT / "longtask").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                if name == "through" and node.args and isinstance(node.args[0], ast.Constant):
                    names.add(str(node.args[0].value))
                for kw in node.keywords:
                    if kw.arg == "door" and isinstance(kw.value, ast.Constant):
                        names.add(str(kw.value.value))
        for node in ast.walk(tree):
            if not isinstance(node, ast.With):
                continue
            guards = {
                getattr(i.context_expr.func, "id", getattr(i.context_expr.func, "attr", ""))
                for i in node.items
                if isinstance(i.context_expr, ast.Call)
            }
            if guards & {"through", "trusted", "holding"}:
                for inner in ast.walk(node):
                    inner.__dict__["_guarded"] = True
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in writes
                and not node.__dict__.get("_guarded")
                and path.name != "_gate.py"
            ):
                loose.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return names, loose


def test_every_door_of_the_gate_is_tried() -> None:
    names, _ = _package_doors()
    assert names <= {d.gate for d in DOORS if not d.around}, "a door this test does not try"


def test_no_graph_write_goes_around_the_gate() -> None:
    _, loose = _package_doors()
    assert loose == [], "graph state writes outside a door (through/trusted) of the gate"


# -- states, and what a database holds ------------------------------------------------------


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    import os

    with FakeOpenAI(lambda request: Reply.text("thought")) as fake:
        old = {k: os.environ.get(k) for k in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
        os.environ.update(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=fake.base_url)
        yield fake
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def world(db_url: str, llm: FakeOpenAI) -> Iterator[World]:
    runner = Runner(db_url)
    registry = Registry([Registered("gated", f"{__file__}:TASK", TASK)])
    with AdminClient(create_app(runner, TOKENS, registry=registry)) as client:
        yield World(runner, db_url, client)
    runner.close()


def digest(url: str) -> str:
    """Every row of every table, in order: equal digests, an unchanged database."""
    h = hashlib.sha256()
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.split("///", 1)[1])
        try:
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name"
                )
            ]
            for t in tables:
                h.update(t.encode())
                width = len(conn.execute(f'SELECT * FROM "{t}" LIMIT 0').description)
                order = ", ".join(str(i + 1) for i in range(width))
                for row in conn.execute(f'SELECT * FROM "{t}" ORDER BY {order}'):
                    h.update(repr(row).encode())
        finally:
            conn.close()
        return h.hexdigest()
    import psycopg

    with psycopg.connect(url) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema='public' "
                "AND table_type='BASE TABLE' ORDER BY 1"
            )
        ]
        for t in tables:
            h.update(t.encode())
            cur = conn.execute(f'SELECT * FROM "{t}" LIMIT 0')  # type: ignore[arg-type]
            order = ", ".join(str(i + 1) for i in range(len(cur.description or ())))
            for row in conn.execute(f'SELECT * FROM "{t}" ORDER BY {order}'):  # type: ignore[arg-type]
                h.update(repr(row).encode())
    return h.hexdigest()


def make(world: World, state: str, name: str) -> str:
    """A new thread in ``state``."""
    runner = world.runner
    thread = f"{name}-{time.monotonic_ns()}"
    if state == "failed":
        FAIL.add(thread)
        with pytest.raises(StepFailed):
            runner.start(TASK, thread_id=thread)
        FAIL.discard(thread)  # a run after an accepted write goes on
        return thread
    runner.start(TASK, thread_id=thread)
    if state == "cancelled":
        runner.cancel(thread, by="alice")
        return thread
    if state == "running":
        BLOCK[thread], STARTED[thread] = threading.Event(), threading.Event()
        worker = threading.Thread(
            target=runner.approve, args=(thread, "ok"), kwargs={"by": "alice"}, daemon=True
        )
        worker.start()
        assert STARTED[thread].wait(30)
        time.sleep(0.8)  # its live events are stored: the database stands still
        return thread
    if state in ("paused_wait", "completed"):
        runner.approve(thread, "ok", by="alice")
    if state == "completed":
        runner.signal(thread, "ci", {"green": True}, by="ci")
    return thread


def finish(world: World, thread: str) -> None:
    """Answer what the thread waits for until it completes (it must)."""
    runner = world.runner
    BLOCK.pop(thread, None)
    FAIL.discard(thread)
    for _ in range(10):
        st = runner.status(thread, usage=False)
        if st.status == "completed":
            return
        pending = [p.step for p in runner.pending(thread, task=TASK)]
        try:
            if "ok" in pending:
                runner.approve(thread, "ok", by="alice")
            elif "ci" in pending:
                runner.signal(thread, "ci", {"green": True}, by="ci")
            elif st.status == "failed":
                runner.retry(thread, by="alice", task=TASK)
            else:
                runner.resume(thread, task=TASK)
        except StepFailed:
            continue
    pytest.fail(f"thread {thread} did not complete: {runner.status(thread, usage=False)}")


def outcomes(world: World, thread: str) -> dict[str, Any]:
    values = world.runner.graph(TASK).get_state(_config(thread)).values
    return {p: values.get(f"out.{p}") for p in PAUSES}


def manual_updates(world: World, thread: str) -> int:
    return sum(1 for e in world.runner.events(thread) if e.kind == "manual.update")


def try_write(world: World, door: Door, thread: str, t: Target) -> bool:
    """Whether the door accepted the write (a refusal is one of longtask's errors, an exit
    code of the CLI or a 4xx of the server)."""
    try:
        door.write(world, thread, t)
    except (LongTaskError, Refused):
        return False
    except StepFailed:
        return True  # accepted, and the run it started failed (a failed thread's step)
    return True


# -- the matrix -----------------------------------------------------------------------------


@pytest.mark.parametrize("door", DOORS, ids=[d.name for d in DOORS])
@pytest.mark.parametrize("state", STATES)
def test_every_outside_write_passes_the_gate(world: World, door: Door, state: str) -> None:
    shared = make(world, state, "shared")
    tried = 0
    for t in targets(door, shared):
        expect = t.allowed(state, door)
        thread = make(world, state, "own") if expect else shared
        before_ran = Counter(RAN[thread])
        before_outcomes = outcomes(world, thread)
        before_updates = manual_updates(world, thread)
        before = digest(world.url)
        accepted = try_write(world, door, thread, t)
        label = f"{door.name} × {t.name} × {state}"
        assert accepted == expect, f"{label}: {'accepted' if accepted else 'refused'}"
        tried += 1
        # No step behind a pause that had no answer ran, and no pause's outcome changed.
        for step in TASK.steps:
            if guarded(state, step) and not isinstance(TASK.steps[step], PauseStep):
                assert RAN[thread][step] == before_ran[step], f"{label}: {step} ran"
        assert outcomes(world, thread) == before_outcomes, f"{label}: a pause's outcome changed"
        if not accepted:
            assert digest(world.url) == before, f"{label}: a refused write changed the database"
            continue
        assert manual_updates(world, thread) == before_updates + 1, label
        update = next(e for e in world.runner.events(thread) if e.kind == "manual.update")
        assert update.data is not None and update.data["door"] == door.gate
        assert update.data["steps"] == ([t.step] if t.step else []), update.data
        finish(world, thread)
    assert tried >= 15
    # The shared thread took only refusals: it goes on as if nothing had been tried.
    if state == "running":
        BLOCK[shared].set()
        deadline = time.monotonic() + 30
        while world.runner.status(shared, usage=False).status == "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
    if state != "cancelled":
        finish(world, shared)
        assert world.runner.result(shared, "ship") == "shipped"
        assert world.runner.result(shared, "ok")["by"] == "alice"  # the decision, by alice
    else:
        assert world.runner.status(shared, usage=False).status == "cancelled"


def test_updates_in_a_row_compose(world: World) -> None:
    """Item 2: any number of accepted updates in a row leave the thread resumable."""
    thread = make(world, "paused_approval", "row")
    for i in range(4):
        world.runner.resume(thread, Command(update={"prep": {"version": i}}), task=TASK)
    world.runner.graph(TASK).update_state(_config(thread), {"prep": {"version": 9}})
    world.runner.graph(TASK).update_state(_config(thread), {"prep": {"version": 10}})
    assert manual_updates(world, thread) == 6
    finish(world, thread)
    assert world.runner.result(thread, "prep") == {"version": 10}
    # The approval was asked again about the last result, and decided on it.
    required = [e for e in world.runner.events(thread) if e.kind == "approval.required"]
    decided = world.runner.result(thread, "ok")
    assert decided["approved"] and decided["plan_hash"] == required[-1].data["plan_hash"]
