"""An answer is allowed per pause (issue 50, DESIGN promise 10), on both backends.

Every answer door × every pause kind × every caller role: the doors are taken from the app
(its routes with the answer rule, the runs routes a ``command.resume`` goes to, MCP's
answer tool, A2A's ``message/send``), the pause kinds from the runtime's ``Pending``.
Each thread is alice's and waits for an approval that names carol *and* one pause of the
kind under test, so carol passes the thread's gate and only the per-pause decision can
refuse her. Each answer sent is one the pause itself refuses (a wrong plan hash, text the
database cannot store), so an answer the access layer lets through is refused by the
pause's own checks and nothing changes: every table is compared at the end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any, TypedDict, get_args

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from pydantic import BaseModel
from starlette.routing import Route
from starlette.testclient import TestClient
from test_access import tables

from longtask import (
    LongTask,
    PermissionDenied,
    Runner,
    Stage,
    StepContext,
    approval,
    function_step,
    wait_for,
)
from longtask.model import graph_step
from longtask.runtime._views import Pending
from longtask.serve import create_app
from longtask.serve._registry import load_registry
from longtask.serve.access import Answering, Rule, may_answer, rule_of
from longtask.serve.lgapi.protocols._mcp import ANSWER_TOOL
from longtask.steps._effects import args_digest, effect_key

TOKENS = {
    "tok-alice": "alice",
    "tok-bob": "bob",
    "tok-carol": "carol",
    "tok-root": "root-admin",
    "tok-vera": "vera",
}
ROLES = {"root-admin": "admin", "vera": "viewer"}
#: each role, by the token it calls with: alice owns every thread, carol is named by its
#: approval "mine", bob is nobody to it
ROLES_BY_TOKEN = {
    "owner": "tok-alice",
    "approver": "tok-carol",
    "stranger": "tok-bob",
    "admin": "tok-root",
    "viewer": "tok-vera",
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


class Ci(BaseModel):
    passed: bool


class Asked(TypedDict, total=False):
    answer: Any


def _ask(state: Asked) -> Asked:
    return {"answer": interrupt("which environment?")}


def _asking_graph() -> Any:
    g = StateGraph(Asked)
    g.add_node("ask", _ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g.compile()


@function_step
def prep(ctx: StepContext) -> int:
    return 1


def _charge(amount: int) -> dict[str, int]:
    raise AssertionError("the ledger holds a cut-off call: the effect is never called again")


@function_step(after=["prep"])
def pay(ctx: StepContext) -> Any:
    return ctx.effect("charge", _charge, 42)


@function_step(after=["prep"])
def locked(ctx: StepContext) -> str:
    raise PermissionDenied("the key lacks scope deploy:write")


def _mine() -> Any:
    return approval("mine", plan=lambda ctx: {"go": 1}, approvers=["carol"])


def _task(name: str, *steps: Any) -> LongTask:
    # The pause under test beside carol's approval, in one stage: both wait at once (a
    # one-node pause comes after ``prep``, to interrupt in the super-step an approval does).
    return LongTask(name, stages=[Stage("s", [_mine(), *steps])])


PAUSE_MINE = _task("pa_mine")
PAUSE_THEIRS = _task(
    "pa_theirs", approval("theirs", plan=lambda ctx: {"go": 2}, approvers=["dave"])
)
PAUSE_WAIT = _task("pa_wait", wait_for("ci", schema=Ci))
PAUSE_INTERRUPT = _task(
    "pa_interrupt", prep, graph_step("asks", _asking_graph(), input=lambda ctx: {}, after="prep")
)
PAUSE_EFFECT = _task("pa_effect", prep, pay)
PAUSE_PERMISSION = _task("pa_permission", prep, locked)

#: a pause kind (with whom an approval names) -> (its task, the step that pauses)
CASES: dict[str, tuple[str, str, str]] = {
    # case: (task's variable, pause kind, step)
    "approval naming the caller": ("PAUSE_MINE", "approval", "mine"),
    "approval naming someone else": ("PAUSE_THEIRS", "approval", "theirs"),
    "wait": ("PAUSE_WAIT", "wait", "ci"),
    "graph interrupt": ("PAUSE_INTERRUPT", "interrupt", "asks"),
    "effect unknown": ("PAUSE_EFFECT", "effect", "pay"),
    "permission": ("PAUSE_PERMISSION", "permission", "locked"),
}
#: pause kinds no case above builds, and the built kind whose rule is theirs (checked
#: against ``may_answer`` below): a step stopped for a person, and sub-tasks
SAME_RULE = {
    "budget": "permission",
    "deadline": "permission",
    "fix": "permission",
    "subtask": "effect",
}
PAUSE_KINDS = set(get_args(Pending.model_fields["kind"].annotation))


def test_every_pause_kind_is_built_or_has_the_rule_of_one_that_is() -> None:
    built = {kind for _, kind, _ in CASES.values()}
    assert built | set(SAME_RULE) == PAUSE_KINDS, "a new pause kind: build a case for it"
    for kind, like in SAME_RULE.items():
        for level in ("act", "answer", "read", "none", None):
            for approvers in ([], ["carol"]):
                request = {"approvers": approvers}
                this = Pending(step="s", kind=kind, interrupt_id="i", request=request)  # type: ignore[arg-type]
                other = Pending(step="s", kind=like, interrupt_id="i", request=request)  # type: ignore[arg-type]
                who = Answering("carol", "t", level)
                decided = [(may_answer(who, p) or (200, ""))[0] for p in (this, other)]
                assert decided[0] == decided[1], (kind, level, approvers)


def allowed(role: str, case: str) -> str:
    """What the access layer decides: ``pass`` (the pause's own checks then answer),
    ``refused`` (403: the caller sees the thread, the pause is not theirs) or ``hidden``
    (the thread does not exist for them)."""
    if role in ("owner", "admin"):
        return "pass"
    if role == "stranger":
        return "hidden"
    if role == "approver" and case == "approval naming the caller":
        return "pass"
    return "refused"


# -- the doors -------------------------------------------------------------------------

#: a value no pause takes: text with no UTF-8 form (an approval refuses any text)
BAD = "bad\ud800value"


class Door:
    """One way to answer a pause: which kinds it targets, and how to send an answer."""

    def __init__(
        self,
        name: str,
        kinds: set[str] | None,
        send: Callable[[TestClient, str, str, Any], tuple[str, str]],
        consumes: frozenset[str] = frozenset(),
    ) -> None:
        self.name = name
        self.kinds = kinds  # None: any
        self.send = send
        #: kinds whose pause takes whatever this door can carry: an answer it lets through
        #: is accepted, so it is sent to a thread of its own
        self.consumes = consumes


def _http_outcome(r: Any) -> tuple[str, str]:
    text = r.text
    if r.status_code == 404 and "no thread" in text:
        return "hidden", text
    if r.status_code in (401, 403):
        return "refused", text
    assert r.status_code < 500 and r.status_code >= 400, text  # a bad answer: refused by it
    return "pass", text


def _message_outcome(message: str) -> tuple[str, str]:
    if "no thread" in message or "Task not found" in message:
        return "hidden", message
    if any(w in message for w in ("answers only the approvals", "may not answer", "is a viewer")):
        return "refused", message
    return "pass", message


def _path_door(path: str) -> Callable[[TestClient, str, str, Any], tuple[str, str]]:
    """A route with the answer rule: its body naming the pause, with an answer it refuses."""
    suffix = path.rsplit("/", 1)[-1]
    bodies: dict[str, Callable[[Pending], dict[str, Any]]] = {
        "approve": lambda p: {"step": p.step, "plan_hash": "not-the-plan"},
        "reject": lambda p: {"step": p.step, "plan_hash": "not-the-plan"},
        "signal": lambda p: {"name": p.step, "payload": BAD},
        "answer": lambda p: {"interrupt": p.interrupt_id, "value": BAD},
        "resolve": lambda p: {"key": p.request["key"], "outcome": "succeeded", "result": BAD},
    }
    assert suffix in bodies, f"a new answer door {path}: give it a body here"

    def send(client: TestClient, token: str, thread: str, pause: Pending) -> tuple[str, str]:
        url = path.replace("{thread_id}", thread)
        r = _post(client, url, bodies[suffix](pause), _bearer(token))
        return _http_outcome(r)

    return send


def _run_door(path: str) -> Callable[[TestClient, str, str, Any], tuple[str, str]]:
    """A LangGraph run of the thread that only resumes, keyed by the pause's interrupt id."""

    def send(client: TestClient, token: str, thread: str, pause: Pending) -> tuple[str, str]:
        body = {
            "assistant_id": _task_of(thread),
            "command": {"resume": {pause.interrupt_id: BAD}},
        }
        url = path.replace("{thread_id}", thread)
        if path.endswith("/stream"):
            sent = _json(body)
            headers = {**sent["headers"], **_bearer(token)}
            with client.stream("POST", url, content=sent["content"], headers=headers) as r:
                text = r.read().decode()
                if r.status_code == 200:
                    assert "event: error" in text, text  # refused in the request or run
                    return "pass", text
                return _http_outcome(_Sent(r.status_code, text))
        return _http_outcome(_post(client, url, body, _bearer(token)))

    return send


class _Sent:
    def __init__(self, status_code: int, text: str) -> None:
        self.status_code = status_code
        self.text = text


#: MCP's JSON parser takes no lone surrogate: an answer each kind refuses, where one does
_MCP_BAD: dict[str, Any] = {"approval": "maybe", "wait": {"passed": "not-a-bool"}, "effect": 1}


def _mcp_send(client: TestClient, token: str, thread: str, pause: Pending) -> tuple[str, str]:
    answer = _MCP_BAD.get(pause.kind, "go on")
    args = {"thread_id": thread, "step": pause.interrupt_id, "answer": answer}
    rpc = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": ANSWER_TOOL, "arguments": args},
    }
    got = _post(client, "/mcp", rpc, {**MCP_HEADERS, **_bearer(token)})
    assert got.status_code == 200, got.text
    result = got.json()["result"]
    text = result["content"][0]["text"]
    if not result.get("isError"):
        assert pause.kind not in _MCP_BAD, text  # a bad answer is never accepted
        return "pass", text
    return _message_outcome(json.loads(text)["error"])


def _a2a_send(client: TestClient, token: str, thread: str, pause: Pending) -> tuple[str, str]:
    task_id = f"{thread}:{STARTED[thread]}"
    data = {"kind": "data", "data": {"resume": {pause.interrupt_id: BAD}}}
    message = {
        "role": "user",
        "messageId": "m-answer",
        "parts": [data],
        "taskId": task_id,
        "contextId": thread,
    }
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    headers = {**_bearer(token), "Accept": "application/json"}
    r = _post(client, f"/a2a/{_task_of(thread)}", rpc, headers)
    assert r.status_code == 200, r.text
    found = r.json()
    assert "error" in found, found
    return _message_outcome(found["error"]["message"])


#: the runs routes a ``command.resume`` goes to: a thread's runs
_RUN_SUFFIXES = ("/runs", "/runs/wait", "/runs/stream")


def doors_of(client: TestClient) -> list[Door]:
    """Every answer door of the app: its routes with the answer rule, the runs of a thread
    (``command.resume``), MCP's answer tool and A2A."""
    out: list[Door] = []
    targets = {
        "approve": {"approval"},
        "reject": {"approval"},
        "signal": {"wait"},
        "resolve": {"effect"},
    }
    for route in client.app.routes:  # type: ignore[attr-defined]
        assert isinstance(route, Route)
        if "POST" not in (route.methods or ()):
            continue
        if rule_of(route) is Rule.ANSWER:
            suffix = route.path.rsplit("/", 1)[-1]
            kinds = targets.get(suffix, {"interrupt"} if suffix == "answer" else None)
            out.append(Door(route.path, kinds, _path_door(route.path)))
        elif route.path.startswith("/threads/{thread_id}") and route.path.endswith(_RUN_SUFFIXES):
            out.append(Door(route.path, None, _run_door(route.path)))
    tools = _mcp_tools(client)
    assert ANSWER_TOOL in tools
    consumes = PAUSE_KINDS - set(_MCP_BAD)
    out.append(Door(f"mcp {ANSWER_TOOL}", None, _mcp_send, frozenset(consumes)))
    assert any(r.path.startswith("/a2a/") for r in client.app.routes)  # type: ignore[attr-defined]
    out.append(Door("a2a message/send", None, _a2a_send))
    return out


def _mcp_tools(client: TestClient) -> list[str]:
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    got = client.post("/mcp", json=rpc, headers={**MCP_HEADERS, **_bearer("tok-alice")})
    return [t["name"] for t in got.json()["result"]["tools"]]


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _json(body: Any) -> dict[str, Any]:
    """A request's JSON body with every non-ASCII character escaped (``BAD`` has no UTF-8
    form: escaped, it reaches the server as JSON may carry it)."""
    return {"content": json.dumps(body), "headers": {"Content-Type": "application/json"}}


def _post(client: TestClient, url: str, body: Any, headers: dict[str, str]) -> Any:
    sent = _json(body)
    return client.post(url, content=sent["content"], headers={**sent["headers"], **headers})


# -- the threads -----------------------------------------------------------------------

#: thread -> the run that started it (A2A's task id), and its task
STARTED: dict[str, str] = {}
TASK_OF: dict[str, str] = {}


def _task_of(thread: str) -> str:
    return TASK_OF[thread]


@pytest.fixture
def runner(db_url: str) -> Iterator[Runner]:
    r = Runner(db_url)
    yield r
    r.close()


@pytest.fixture
def client(runner: Runner) -> Iterator[TestClient]:
    refs = [f"test_access_pauses:{var}" for var, _, _ in CASES.values()]
    app = create_app(
        runner, TOKENS, roles=ROLES, registry=load_registry(refs), schedule_poll=None, poll=0.02
    )
    with TestClient(app) as c:
        yield c


def start(client: TestClient, runner: Runner, case: str, n: int = 0) -> tuple[str, Pending]:
    """Alice's thread for ``case`` (the ``n``-th), waiting for carol's approval and the
    pause under test (started through the API, as A2A's tasks are)."""
    var, kind, step = CASES[case]
    task: LongTask = globals()[var]
    thread = f"pa-{var.lower().replace('_', '-')}-{n}"
    if kind == "effect":
        # What a call cut off by a crash leaves in the ledger: started, no outcome.
        digest = args_digest("charge", (42,), {})
        key = effect_key(thread, "pay", "charge", digest, None)
        assert runner.db.store.effect_start(key, thread, "pay", "charge", digest)
    r = client.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": task.name, "input": {}, "if_not_exists": "create"},
        headers=_bearer("tok-alice"),
    )
    assert r.status_code == 200, r.text
    STARTED[thread] = r.headers["content-location"].rsplit("/", 1)[-1]
    TASK_OF[thread] = task.name
    pending = {p.step: p for p in runner.pending(thread)}
    assert pending["mine"].request["approvers"] == ["carol"], pending
    assert pending[step].kind == kind, pending
    return thread, pending[step]


def test_each_answer_door_asks_about_the_pause_it_answers(
    runner: Runner, client: TestClient
) -> None:
    threads = {case: start(client, runner, case) for case in CASES}
    doors = doors_of(client)
    assert len(doors) >= 9, [d.name for d in doors]
    before = tables(runner)
    wrong: list[str] = []
    later: list[tuple[Door, str, str]] = []
    seen = 0

    def send(door: Door, case: str, role: str, thread: str, pause: Pending) -> None:
        want = allowed(role, case)
        got, text = door.send(client, ROLES_BY_TOKEN[role], thread, pause)
        if got != want:
            wrong.append(f"{door.name} × {case} × {role}: {got}, want {want}: {text[:160]}")

    for door in doors:
        for case, (thread, pause) in threads.items():
            if door.kinds is not None and pause.kind not in door.kinds:
                continue
            for role in ROLES_BY_TOKEN:
                seen += 1
                if pause.kind in door.consumes and allowed(role, case) == "pass":
                    later.append((door, case, role))
                    continue
                send(door, case, role, thread, pause)
    assert not wrong, "\n".join(wrong)
    assert seen >= 150
    assert tables(runner) == before, "a refused answer changed stored state"
    # An answer let through that its pause takes is accepted: each on a thread of its own.
    for n, (door, case, role) in enumerate(later, 1):
        thread, pause = start(client, runner, case, n)
        send(door, case, role, thread, pause)
    assert not wrong, "\n".join(wrong)


def test_carol_named_by_one_approval_cannot_signal_the_owners_wait(
    runner: Runner, client: TestClient
) -> None:
    """The issue's case: carol, named by an approval of alice's thread, sends the thread's
    wait a valid 'CI passed' payload: refused at every door; her own approval she answers,
    through a run's ``command.resume`` too; a resume that would answer both is refused
    whole."""
    thread, wait = start(client, runner, "wait")
    mine = next(p for p in runner.pending(thread) if p.step == "mine")
    carol = _bearer("tok-carol")
    before = tables(runner)
    r = client.post(
        f"/api/threads/{thread}/signal",
        json={"name": "ci", "payload": {"passed": True}},
        headers=carol,
    )
    assert r.status_code == 403 and "answers only the approvals" in r.text, r.text
    both = {mine.interrupt_id: True, wait.interrupt_id: {"passed": True}}
    r = client.post(
        f"/threads/{thread}/runs",
        json={"assistant_id": "pa_wait", "command": {"resume": both}},
        headers=carol,
    )
    assert r.status_code == 403, r.text
    # a run that does more than answer is not an answer: it acts
    r = client.post(
        f"/threads/{thread}/runs",
        json={
            "assistant_id": "pa_wait",
            "command": {"resume": {mine.interrupt_id: True}},
            "multitask_strategy": "rollback",
        },
        headers=carol,
    )
    assert r.status_code == 403, r.text
    assert tables(runner) == before
    r = client.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "pa_wait", "command": {"resume": {mine.interrupt_id: True}}},
        headers=carol,
    )
    assert r.status_code == 200, r.text
    (resolved,) = runner.events(thread, kinds=["approval.resolved"])
    assert resolved.data["by"] == "carol"
    assert [p.step for p in runner.pending(thread)] == ["ci"]
    # Answered: she reads the thread (her decision and how it goes), and answers no more.
    assert client.get(f"/api/threads/{thread}", headers=carol).status_code == 200
    r = client.post(
        f"/api/threads/{thread}/signal",
        json={"name": "ci", "payload": {"passed": True}},
        headers=carol,
    )
    assert r.status_code == 403, r.text
    assert not runner.events(thread, kinds=["wait.resolved"])
    # The owner signals it.
    r = client.post(
        f"/api/threads/{thread}/signal",
        json={"name": "ci", "payload": {"passed": True}},
        headers=_bearer("tok-alice"),
    )
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 30
    while runner.status(thread).status != "completed" and time.monotonic() < deadline:
        time.sleep(0.05)
    (signalled,) = runner.events(thread, kinds=["wait.resolved"])
    assert signalled.data["by"] == "alice"
