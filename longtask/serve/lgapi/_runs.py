"""The LangGraph Server API's runs: create, stream, wait, join, cancel, list, get.

A run request is checked and recorded here, then carried out by ``serve``'s executor
(see ``_executor``): no request handler advances a thread.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from longtask.errors import InvalidInput, TaskRefError, ThreadNotFound
from longtask.model import GraphApp, takes_context
from longtask.runtime._inputs import validate_context
from longtask.serve._executor import FINAL_RUN
from longtask.serve._webhooks import check_url, redacted
from longtask.serve.access import Answering, Rule, caller_of, check_owner_key, matches
from longtask.serve.lgapi._body import id_text, mapping_field, query_integer
from longtask.serve.lgapi._chat import chat_input
from longtask.serve.lgapi._commands import plan_command, plan_continue
from longtask.serve.lgapi._json import run_json, sse
from longtask.serve.lgapi._plain import plain_head
from longtask.serve.lgapi._runops import cancel_run, refuse_action
from longtask.serve.lgapi._state import current_state, thread_state
from longtask.serve.lgapi._stream import checked_modes, follow, modes_of, query_modes
from longtask.serve.lgapi.resources._assistant_body import (
    RUN_SET,
    inputs_with_context,
    run_context,
    run_settings,
)

if TYPE_CHECKING:
    from longtask._runner import Runner
    from longtask.model import LongTask
    from longtask.serve._registry import Registered
    from longtask.serve.lgapi._common import Api
    from longtask.store import ThreadRecord
    from longtask.store._apiruns import ApiRun
    from longtask.store._assistants import AssistantRow

#: seconds between reads of a run's status while a request waits for it to finish
_POLL = 0.1


#: what a run shows of its request as it was asked, kept when a queued run is planned
SHOWN = ("multitask_strategy", "stream_mode", "stream_subgraphs", "kwargs")
#: what a run applies and runs, kept when a queued run is planned
KEPT = ("context", "run_config", "assistant", "graph")
#: the multitask strategies carried out: ``enqueue`` (the default, as on LangGraph's server)
#: runs a thread's runs one after another in the order they were recorded; ``reject``
#: refuses a run while another of its thread is open
STRATEGIES = ("enqueue", "reject")


class LeaveAware(StreamingResponse):
    """A stream that calls ``on_leave`` when its client goes before its end
    (``on_disconnect="cancel"``, ``cancel_on_disconnect``): the body generator is not closed
    when the response is cancelled, so this is told at the response's own end."""

    def __init__(
        self, parts: AsyncIterator[bytes], on_leave: Callable[[], Awaitable[None]], **kwargs: Any
    ) -> None:
        self.ended = False
        self.on_leave = on_leave

        async def tracked() -> AsyncIterator[bytes]:
            async for chunk in parts:
                yield chunk
            self.ended = True

        super().__init__(tracked(), **kwargs)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if not self.ended:
                # shielded: the request's own cancellation must not stop the cancel
                with anyio.CancelScope(shield=True):
                    await self.on_leave()


def on_disconnect(body: dict[str, Any]) -> bool:
    """Whether the run is cancelled when its client leaves first (``on_disconnect``:
    ``cancel``; ``continue``, the default, lets it run on), or a 422."""
    value = body.get("on_disconnect")
    if value is None or value == "continue":
        return False
    if value == "cancel":
        return True
    raise HTTPException(
        422, f"on_disconnect must be cancel or continue (the default), not {value!r}"
    )


def query_flag(request: Request, name: str) -> bool:
    """A true/false query parameter as LangGraph's server reads one, or a 422."""
    raw = request.query_params.get(name)
    if raw is None or raw.lower() in ("false", "no", "0", ""):
        return False
    if raw.lower() in ("true", "yes", "1"):
        return True
    raise HTTPException(422, f"{name} must be true or false, not {raw!r}")


def run_breaks(body: dict[str, Any], entry: Registered) -> dict[str, Any] | None:
    """A served graph's run's ``interrupt_before`` / ``interrupt_after`` (``"*"`` or node
    names of the graph), checked (a 422 naming the nodes there are); None when it asks none.
    A task's run is refused them: its thread pauses where its task says."""
    asked = {k: body.get(k) for k in ("interrupt_before", "interrupt_after") if body.get(k)}
    if not asked:
        return None
    graph = entry.graph
    if graph is None:
        key = next(iter(asked))
        raise HTTPException(
            422,
            f"{key} is not supported: a longtask thread pauses where its task says "
            "(approval and wait steps, gates); add an approval step instead",
        )
    nodes = [n for n in graph.nodes if n != "__start__"]
    for key, value in asked.items():
        if value == "*":
            continue
        if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
            raise HTTPException(422, f'{key} must be "*" or a list of node names, not {value!r}')
        unknown = [n for n in value if n not in nodes]
        if unknown:
            raise HTTPException(
                422,
                f"{key} names {', '.join(map(repr, unknown))}, not a node of graph "
                f"{entry.name!r}; its nodes are {', '.join(nodes)}",
            )
    return {"before": asked.get("interrupt_before"), "after": asked.get("interrupt_after")}


def refuse_unsupported(body: dict[str, Any]) -> None:
    """Options of a run request longtask does not carry out: a 422 naming the option and
    what longtask does instead, before anything is recorded (never silently ignored).
    ``interrupt_before`` / ``interrupt_after`` are checked by ``run_breaks``."""
    strategy = body.get("multitask_strategy")
    if strategy is not None and strategy not in STRATEGIES:
        raise HTTPException(
            422,
            f"multitask_strategy {strategy!r} is not supported: enqueue (the default) runs "
            "it after the thread's open runs, reject refuses it while one is open. "
            "interrupt and rollback would stop the run in progress, and stopping a longtask "
            "run cancels its thread (with the task's compensations): cancel that run "
            "yourself (runs.cancel) if that is what you mean, then start the next",
        )
    if body.get("after_seconds"):
        raise HTTPException(
            422,
            "after_seconds is not supported: start a run later with a schedule "
            "(`longtask schedule add`), or create it when it is due",
        )
    if body.get("checkpoint_id") or body.get("checkpoint"):
        raise HTTPException(
            422,
            "a run from a past checkpoint (checkpoint_id / checkpoint) is not supported: "
            "branch the thread there with `longtask fork THREAD CHECKPOINT`, then resume it",
        )


def _config_of(body: dict[str, Any]) -> dict[str, Any]:
    """A run's ``config``, checked: an object whose ``configurable`` and ``metadata`` are
    objects too (a 422 naming the one that is not, before anything is recorded)."""
    config = mapping_field(body, "config")
    for key in ("configurable", "metadata"):
        value = config.get(key)
        if value is not None and not isinstance(value, dict):
            raise HTTPException(422, f"config.{key} must be an object, not {value!r}")
    return config


def _at_head(api: Api, thread_id: str | None, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without a checkpoint that is the thread's latest one (Agent Chat UI sends
    the head it shows with every resume): a run from there is a run of the thread."""
    given = body.get("checkpoint_id")
    checkpoint = body.get("checkpoint")
    if isinstance(checkpoint, dict):
        given = given or checkpoint.get("checkpoint_id")
        if checkpoint.get("checkpoint_ns") not in (None, ""):
            return body
    if not given or not isinstance(given, str) or thread_id is None:
        return body
    head = api.runner.db.saver.head(thread_id)
    if (head is not None and head.config["configurable"].get("checkpoint_id") == given) or (
        given == _plain_head(api, thread_id)
    ):
        return {k: v for k, v in body.items() if k not in ("checkpoint_id", "checkpoint")}
    return body


def _plain_at(api: Api, thread_id: str | None, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with a past checkpoint of a served plain graph's thread named as its
    ``checkpoint_id`` only (one of the graph's own checkpoints, which its history lists): a
    run from there is carried out (a new input on a branch, ``Runner.run_again(at=)``)."""
    given = body.get("checkpoint_id")
    checkpoint = body.get("checkpoint")
    if isinstance(checkpoint, dict):
        given = given or checkpoint.get("checkpoint_id")
    if not given or thread_id is None:
        return body
    rec = api.runner.db.store.get_thread(thread_id)
    entry = api.registry.find(rec.task_name) if rec is not None else None
    if rec is None or entry is None or not isinstance(entry.for_thread(rec), GraphApp):
        return body
    rest = {k: v for k, v in body.items() if k != "checkpoint"}
    return {**rest, "checkpoint_id": given}


def _plain_head(api: Api, thread_id: str) -> str | None:
    """The latest checkpoint of a served plain graph's own (what its state shows as the
    thread's head), for a thread of one."""
    rec = api.runner.db.store.get_thread(thread_id)
    entry = api.registry.find(rec.task_name) if rec is not None else None
    task = entry.for_thread(rec) if entry is not None and rec is not None else None
    return plain_head(api.runner, task, thread_id) if isinstance(task, GraphApp) else None


def refuse_busy(api: Api, thread_id: str) -> str:
    """One run of a thread at a time (the SDK's ``multitask_strategy="reject"``); returns
    the mark ``record`` checks again when it stores the run, so that of two requests
    checked at once only one is recorded."""
    mark = api.runner.db.store.api_run_mark(thread_id)
    if mark is None:
        raise _busy(thread_id)
    return mark


def _busy(thread_id: str) -> HTTPException:
    return HTTPException(
        409,
        f"thread {thread_id!r} has a run in progress; join it or cancel it first (or send "
        'multitask_strategy="enqueue" to run this one after it)',
    )


def context(api: Api, thread_id: str) -> dict[str, Any]:
    """What a run's stream and its end are measured from, read when the run is planned:
    the thread's last event, its steps with results, the conversation it waits in and how
    often it has advanced (a run handed to the workers lasts until a worker has advanced
    it once more, and a serve started again after a kill can only tell that from the
    count kept with the run)."""
    runner = api.runner
    store = runner.db.store
    rec = store.get_thread(thread_id)
    return {
        "since_event": store.api_last_event(thread_id),
        "before": sorted(runner.results(thread_id)) if rec is not None else [],
        "before_agent": _conversation(api, rec),
        "runs_before": rec.runs if rec is not None else 0,
    }


def record(
    api: Api,
    thread_id: str,
    assistant_id: str,
    request: dict[str, Any],
    actor: str,
    metadata: dict[str, Any] | None = None,
    *,
    seen: str | None = None,
    webhook: str | None = None,
    queued: bool = False,
) -> ApiRun:
    """Record a checked run request and hand it to the executor; returns the run. With
    ``seen`` (from ``refuse_busy`` before the request was checked): a 409 if another run
    of the thread was recorded since, or its state changed (a state update committed), as
    the check may no longer hold. ``webhook``: the
    checked URL the run is POSTed to when it ends. ``queued``: a run behind the thread's
    open ones, planned (checked against the thread's state) when its turn comes."""
    store = api.runner.db.store
    request.setdefault("stream_mode", ["values"])
    if not queued:
        request.update(context(api, thread_id))
    run_id = str(uuid.uuid4())
    if not store.api_run_create(
        run_id,
        thread_id,
        assistant_id,
        request,
        actor,
        metadata,
        seen=seen,
        webhook=webhook,
        queued=queued,
    ):
        if seen is not None and store.api_run_changed(thread_id, seen):
            raise HTTPException(
                409,
                f"the state of thread {thread_id!r} changed while this request was checked "
                "(a state update was written): nothing was recorded; look at the thread "
                f"again (`longtask status {thread_id}`) and send the request again if it "
                "still applies",
            )
        raise _busy(thread_id)
    # Read before it is handed over: the answer says the run as recorded (pending, as on
    # LangGraph's server), not wherever the executor has taken it a moment later.
    found = store.api_run(run_id)
    assert found is not None
    api.executor.submit(run_id)
    return found


def _one_of(raw_input: Any) -> None:
    # An empty input beside a command is what useStream's submit({}, {command}) sends: the
    # command wins, as on LangGraph's server. Input with content would be dropped: refused.
    if raw_input not in (None, {}):
        raise InvalidInput(
            "send input or command, not both: a command answers or moves a started "
            "thread and ignores input (an empty input, {}, is accepted beside it)"
        )


def _kwargs(
    body: dict[str, Any],
    config: dict[str, Any],
    thread_id: str,
    temporary: bool,
    webhook: str | None,
) -> dict[str, Any]:
    """What the run was asked, as LangGraph's Run shows it (its kwargs)."""
    return {
        "input": body.get("input"),
        "command": body.get("command"),
        "config": {
            **config,
            "configurable": {**(config.get("configurable") or {}), "thread_id": thread_id},
            "metadata": dict(config.get("metadata") or {}),
        },
        "context": body.get("context") or {},
        "subgraphs": bool(body.get("stream_subgraphs")),
        "resumable": bool(body.get("stream_resumable")),
        "temporary": temporary,
        # Shown without credentials or query string: whoever reads the run may not be
        # whoever may call the receiver.
        "webhook": redacted(webhook) if webhook else None,
        "feedback_keys": None,
        "interrupt_before": None,
        "interrupt_after": None,
        "checkpoint_during": True,
        "durability": "sync",  # every step is checkpointed before the next starts
    }


def _same_context(runner: Runner, rec: ThreadRecord, task: LongTask, body: dict[str, Any]) -> None:
    """A run that continues a thread (an answer, a command, a resume) goes on with the run
    context the thread has (what started it, or its latest new input brought): it is part
    of the thread's durable state. A context (or ``configurable``) sent with it that says
    otherwise is refused (422) rather than dropped; the same values sent again pass."""
    if not takes_context(task.steps.values()):
        return
    config = body.get("config")
    configurable = mapping_field(config, "configurable") if isinstance(config, dict) else {}
    own = {
        **{k: v for k, v in configurable.items() if k not in RUN_SET and not k.startswith("__")},
        **mapping_field(body, "context"),
    }
    if not own:
        return
    current = runner.run_context(rec.thread_id)
    differ = sorted(k for k, v in own.items() if current.get(k, _ABSENT) != v)
    if differ:
        raise HTTPException(
            422,
            f"thread {rec.thread_id!r} goes on with the context its run has ("
            f"{', '.join(differ)} differ): a run that continues it cannot change it; send the "
            "new context with a new input (the next message), or start a new thread",
        )


def _checked_context(task: LongTask, settings: dict[str, Any]) -> None:
    """A run context the task's graph steps would be given is checked when the run is
    asked (422), not when the executor starts it: plain JSON (a body may hold NaN)."""
    try:
        validate_context(task, run_context(task, settings))
    except InvalidInput as exc:
        raise HTTPException(422, str(exc)) from None


#: a key a context does not have (None is a value)
_ABSENT = object()


def _conversation(api: Api, rec: ThreadRecord | None) -> dict[str, Any]:
    """The agent step a paused thread waits in: its checkpoint namespace, and the ids of its
    messages so far (a resumed run's ``messages`` stream continues after them)."""
    if rec is None or rec.status not in ("waiting_user", "waiting_external"):
        return {}
    try:
        state, ns = current_state(api.runner, api.registry, rec)
    except TaskRefError:
        return {}
    if ns is None:
        return {}
    messages = state["values"].get("messages") or []
    return {"ns": ns, "ids": [m["id"] for m in messages if isinstance(m, dict) and m.get("id")]}


def routes(api: Api) -> list[Route]:
    runner = api.runner
    store = runner.db.store

    def plan(
        thread_id: str,
        entry: Registered,
        body: dict[str, Any],
        actor: str,
        new_thread: bool,
        defaults: dict[str, Any] | None,
        answering: Answering | None,
    ) -> tuple[bool, dict[str, Any]]:
        """What ``body`` asks of the thread as it is now, checked against its state
        (raises, storing nothing): whether the run makes a new thread, and the request.
        ``answering``: which of its pauses the caller may answer (None: none)."""
        rec = store.get_thread(thread_id)
        if rec is None and not new_thread and store.api_thread(thread_id) is None:
            if body.get("if_not_exists") != "create":
                raise ThreadNotFound(thread_id, runner.db.url.redacted)
            new_thread = True
        if rec is not None and rec.task_name != entry.name:
            raise InvalidInput(
                f"thread {thread_id!r} runs task {rec.task_name!r}, not {entry.name!r}"
            )
        command = body.get("command")
        raw_input = body.get("input")
        if command and body.get("checkpoint_id") is not None:
            raise InvalidInput(
                "a command from a past checkpoint of a served graph's thread is not supported: "
                "send a new input from there, or answer the thread's latest interrupt"
            )
        if command:
            if rec is None:
                raise InvalidInput(f"thread {thread_id!r} has not started: send input to start it")
            _one_of(raw_input)
            task = entry.for_thread(rec)
            _same_context(runner, rec, task, body)
            return new_thread, plan_command(runner, rec, task, dict(command), actor, answering)
        if rec is None:
            if raw_input is not None and not isinstance(raw_input, dict):
                raise HTTPException(422, "a run's input is an object of the task's inputs")
            raw_input = chat_input(raw_input, entry.task)
            raw_input = inputs_with_context(runner, entry.task, raw_input, defaults)
            return new_thread, {"kind": "start", "graph": entry.name, "input": raw_input or {}}
        at = body.get("checkpoint_id")
        if at is not None and not raw_input:
            raise InvalidInput(
                "a run from a past checkpoint of a served graph's thread takes the new input "
                "to run it with (a run of it as it was is not supported): send input, or fork "
                f"with `longtask fork {thread_id} CHECKPOINT --inputs JSON` and resume"
            )
        if raw_input:
            task = entry.for_thread(rec)
            if isinstance(task, GraphApp):
                # A served LangGraph graph runs again on its state, as on LangGraph's
                # server (the next message of a chat); checked now, storing nothing.
                if not isinstance(raw_input, dict):
                    raise HTTPException(422, "a run's input is an object of the graph's input")
                raw_input = chat_input(raw_input, task)
                runner.turns.refusal(rec, task)
                runner.engine.validate_inputs(task, raw_input)
                if at is None:
                    return new_thread, {"kind": "turn", "input": raw_input}
                id_text(at, "checkpoint_id")
                runner.turns.branch_point(rec, task, at)
                return new_thread, {"kind": "turn", "input": raw_input, "at": at}
            if rec.status in ("completed", "failed", "cancelled"):
                raise InvalidInput(
                    f"thread {thread_id!r} has {rec.status} task {entry.name!r}: a longtask "
                    "thread runs its task once; start a new thread for a new request"
                )
            raise InvalidInput(
                f"thread {thread_id!r} has started task {entry.name!r} already; answer what "
                'it waits for with command={"resume": ...}, or start a new thread'
            )
        _same_context(runner, rec, entry.for_thread(rec), body)
        return new_thread, plan_continue(rec)

    def prepare(
        thread_id: str | None,
        entry: Registered,
        body: dict[str, Any],
        actor: str,
        assistant: AssistantRow | None = None,
        answering: Answering | None = None,
    ) -> ApiRun:
        """Check a run request and record it. ``answering``: which pauses of the thread
        the caller may answer, for a ``command.resume`` (None: none)."""
        found = checked(thread_id, entry, body, actor, assistant, answering, dry=False)
        assert found is not None
        return found

    def check_run(
        thread_id: str | None,
        entry: Registered,
        body: dict[str, Any],
        actor: str,
        assistant: AssistantRow | None = None,
    ) -> None:
        """Every check ``prepare`` makes of a run request, recording nothing (raises); no
        pause is answered through it."""
        checked(thread_id, entry, body, actor, assistant, None, dry=True)

    def checked(
        thread_id: str | None,
        entry: Registered,
        body: dict[str, Any],
        actor: str,
        assistant: AssistantRow | None,
        answering: Answering | None,
        dry: bool,
    ) -> ApiRun | None:
        thread_id_given = thread_id
        given = _at_head(api, thread_id, body)
        body = _plain_at(api, thread_id, given)
        plain_at = body is not given  # carried out: not an unsupported option here
        refuse_unsupported({k: v for k, v in body.items() if k != "checkpoint_id" or not plain_at})
        breaks = run_breaks(body, entry)
        config = _config_of(body)
        settings = run_settings(assistant, body, config)
        _checked_context(entry.task, settings)
        shown_id = assistant.assistant_id if assistant is not None else entry.assistant_id
        mapping_field(body, "metadata")  # the run's metadata: an object (or none)
        webhook = check_url(body["webhook"]) if body.get("webhook") is not None else None
        if api.webhooks_off:
            webhook = None  # http.disable_webhooks: never called
        command = body.get("command")
        if command is not None and not isinstance(command, dict):
            raise HTTPException(
                422, f"command must be an object of resume, update and goto, not {command!r}"
            )
        # none, or an empty list: the default ("values"), as on LangGraph's server
        modes = checked_modes(body.get("stream_mode") or None)
        # A thread of its own for a stateless run, or one if_not_exists asks for: recorded
        # with the run, once every check has passed; a refused run stores nothing.
        new_thread = thread_id is None
        if thread_id is None:
            thread_id = str(uuid.uuid4())
        shown = {
            "multitask_strategy": body.get("multitask_strategy") or "enqueue",
            "stream_mode": sorted(modes),
            "stream_subgraphs": bool(body.get("stream_subgraphs")),
            "kwargs": _kwargs(body, config, thread_id, thread_id_given is None, webhook),
            # what the run applies (the assistant's version under the run's own), and the
            # task it runs: a queued run is planned with them when its turn comes
            **settings,
            "graph": entry.name,
            # where the run stops its graph (a served graph's, for this run only)
            **({"breaks": breaks} if breaks else {}),
        }
        seen = store.api_run_mark(thread_id)
        if seen is None:
            # A run of the thread is open: refused (reject), or recorded behind it and
            # planned when its turn comes (enqueue), as the thread will be by then.
            if body.get("multitask_strategy") == "reject":
                raise _busy(thread_id)
            if command:
                _one_of(body.get("input"))
                if command.get("resume") is not None and (answering is None or answering.limited):
                    # Which pause it would answer is known only when its turn comes: only
                    # who may answer every pause of the thread is queued behind a run.
                    raise HTTPException(
                        409,
                        f"thread {thread_id!r} has a run in progress: answer its pause once "
                        "the run has ended",
                    )
            if dry:
                return None
            asked = {
                k: body[k]
                # context and config: checked against the thread's when planned
                for k in ("input", "command", "if_not_exists", "checkpoint_id", "context", "config")
                if k in body
            }
            request = {"kind": "queued", "body": asked, **shown}
            return record(
                api,
                thread_id,
                shown_id,
                request,
                actor,
                body.get("metadata"),
                webhook=webhook,
                queued=True,
            )
        new_thread, request = plan(
            thread_id, entry, body, actor, new_thread, settings["context"], answering
        )
        if dry:
            return None
        if new_thread:
            # As on LangGraph's server: a thread a run creates has the run's metadata (an
            # owner an auth handler set, for one).
            made = {**(body.get("metadata") or {}), "graph_id": entry.name}
            store.api_thread_put(thread_id, made, owner=actor)
        return record(
            api,
            thread_id,
            shown_id,
            {**request, **shown},
            actor,
            body.get("metadata"),
            seen=seen,
            webhook=webhook,
        )

    def plan_queued(run: ApiRun) -> ApiRun:
        """A queued run, planned now that its turn has come (raises InvalidInput, storing
        nothing, when what it asks no longer fits the thread)."""
        req = run.request
        try:
            entry = api.registry.get(str(req["graph"]))
        except LookupError as exc:
            raise InvalidInput(str(exc)) from None
        try:
            # Queued only for who may answer every pause of the thread (``checked``).
            acting = Answering(run.actor, run.thread_id, "act")
            _, planned = plan(
                run.thread_id,
                entry,
                req["body"],
                run.actor or "api",
                False,
                req.get("context"),
                acting,
            )
        except HTTPException as exc:
            raise InvalidInput(str(exc.detail)) from None
        kept = {k: req[k] for k in (*SHOWN, "position", *KEPT) if k in req}
        planned = {**planned, **kept, **context(api, run.thread_id)}
        store.api_run_planned(run.run_id, planned)
        return replace(run, request=planned)

    api.executor.planner = plan_queued
    api.prepare = prepare
    api.check_run = check_run

    async def create(
        request: Request, actor: str, thread_id: str | None, body: dict[str, Any] | None = None
    ) -> ApiRun:
        if body is None:
            body = await api.json_body(request)
        if "assistant_id" not in body:
            raise HTTPException(422, "assistant_id is required")
        entry, assistant = await api.call(api.resolve, str(body["assistant_id"]))
        if assistant is not None:
            # As on LangGraph's server: a created assistant is read through its handlers.
            filters = await api.access.ask(
                request, "assistants", "read", {"assistant_id": assistant.assistant_id}
            )
            if not matches(assistant.metadata, filters):
                raise HTTPException(404, f"no assistant {assistant.assistant_id!r}")
        edited = getattr(request.state, "handler_metadata", None)
        if edited is not None:
            body = {**body, "metadata": edited}  # the run's metadata as its handler left it
        else:
            # a thread the run creates gets the run's metadata: no owner but who starts it
            check_owner_key(body.get("metadata"), actor, "the run")
        answering = api.access.answering(request) if thread_id is not None else None
        return await api.call(prepare, thread_id, entry, body, actor, assistant, answering)

    def located(run: ApiRun, response: Response) -> Response:
        response.headers["Content-Location"] = f"/threads/{run.thread_id}/runs/{run.run_id}"
        return response

    async def finished(
        run_id: str, watched: Request | None = None, actor: str | None = None
    ) -> ApiRun:
        """The run once it ended; with ``watched``, a client that leaves before then cancels
        it (by ``actor``) and ends the wait."""
        while True:
            run = await api.call(store.api_run, run_id)
            if run is None:
                raise HTTPException(404, f"no run {run_id!r}")
            if run.status in FINAL_RUN:
                return run
            if watched is not None and actor is not None and await watched.is_disconnected():
                await cancel_if_open(run_id, actor)
                return run  # nobody reads the answer
            await anyio.sleep(_POLL)

    def outcome(run: ApiRun) -> dict[str, Any]:
        """What wait and join answer: the thread's values (with ``__interrupt__`` when it
        paused), or ``__error__`` when the run failed."""
        rec = store.get_thread(run.thread_id)
        if rec is None:
            values: dict[str, Any] = {}
            state = None
        else:
            state = thread_state(runner, api.registry, rec)
            values = dict(state["values"])
        if run.status == "error":
            return {"__error__": {"error": "RunError", "message": run.error or "run failed"}}
        if state is not None and state["interrupts"]:
            values["__interrupt__"] = [{**i, "response_schema": None} for i in state["interrupts"]]
        return values

    async def planned(run: ApiRun) -> ApiRun:
        """``run`` once it is planned: a queued run's stream starts when its turn comes."""
        while run.request.get("kind") == "queued" and run.status not in FINAL_RUN:
            await anyio.sleep(_POLL)
            found = await api.call(store.api_run, run.run_id)
            if found is None:
                break
            run = found
        return run

    async def run_parts(
        run: ApiRun, modes: list[str] | None = None, after: str | None = None
    ) -> AsyncIterator[bytes]:
        """The run's stream (in ``modes``, or those it was asked with), to its end; with
        ``after`` (a ``Last-Event-ID``), only the events after that one."""
        current = await planned(run)
        if modes:
            current.request["stream_mode"] = modes
        if current.request.get("kind") == "queued":  # ended before its turn came
            yield sse("metadata", {"run_id": run.run_id, "attempt": 1})
            message = current.error or f"the run ended {current.status} before it started"
            yield sse("error", {"error": "RunError", "message": message})
            return
        async for chunk in _stream(current, after):
            yield chunk

    api.run_parts = run_parts

    async def cancel_if_open(run_id: str, actor: str) -> None:
        current = await api.call(store.api_run, run_id)
        if current is not None and current.status not in FINAL_RUN:
            await cancel_run(api, current, actor)

    def stream_response(
        run: ApiRun,
        modes: list[str] | None = None,
        leave: str | None = None,
        after: str | None = None,
    ) -> Response:
        """The run's stream; ``leave``: who cancels the run if the client goes first;
        ``after``: the last event a reconnecting client had."""
        parts = run_parts(run, modes, after)
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        if leave is None:
            response = StreamingResponse(parts, media_type="text/event-stream", headers=headers)
        else:
            who = leave
            response = LeaveAware(
                parts,
                lambda: cancel_if_open(run.run_id, who),
                media_type="text/event-stream",
                headers=headers,
            )
        return located(run, response)

    def _stream(run: ApiRun, after: str | None = None) -> AsyncIterator[bytes]:
        req = run.request
        entry = api.registry.find(run.assistant_id) or api.registry.find(str(req.get("graph")))
        before = {name: None for name in req.get("before", [])}
        return follow(
            api,
            run.run_id,
            run.thread_id,
            set(req["stream_mode"]),
            req["since_event"],
            before,
            req.get("before_agent") or {},
            task=entry.task if entry is not None else None,
            subgraphs=bool(req.get("stream_subgraphs")),
            metadata={
                "graph_id": entry.name if entry is not None else None,
                "assistant_id": run.assistant_id,
            },
            after=after,
        )

    # -- handlers --------------------------------------------------------------------------

    async def create_run(request: Request, actor: str) -> Response:
        run = await create(request, actor, request.path_params.get("thread_id"))
        return located(run, JSONResponse(run_json(run)))

    async def stream_run(request: Request, actor: str) -> Response:
        body = await api.json_body(request)
        leave = on_disconnect(body)
        run = await create(request, actor, request.path_params.get("thread_id"), body)
        return stream_response(run, leave=actor if leave else None)

    async def wait_run(request: Request, actor: str) -> Response:
        body = await api.json_body(request)
        leave = on_disconnect(body)
        run = await create(request, actor, request.path_params.get("thread_id"), body)
        done = await finished(run.run_id, request if leave else None, actor)
        return located(run, JSONResponse(await api.call(outcome, done)))

    async def one(request: Request) -> ApiRun:
        run = await api.call(store.api_run, request.path_params["run_id"])
        if run is None or run.thread_id != request.path_params["thread_id"]:
            raise HTTPException(404, f"no run {request.path_params['run_id']!r} of this thread")
        return run

    async def get_run(request: Request) -> Response:
        return JSONResponse(run_json(await one(request)))

    async def list_runs(request: Request) -> Response:
        q = request.query_params
        found = await api.call(
            store.api_runs,
            request.path_params["thread_id"],
            limit=query_integer(q, "limit", 10, 1, 1000),
            offset=query_integer(q, "offset", 0, 0, 10**9),
            status=q.get("status") or None,
        )
        return JSONResponse([run_json(r) for r in found])

    async def cancelling_reader(request: Request) -> str | None:
        """Who cancels the run when this reader leaves (``?cancel_on_disconnect=true``):
        the caller, if they may act on the thread (the gate's decision for acting: 403 or
        404 before anything is sent, as a cancel request would get); None when not asked."""
        if not query_flag(request, "cancel_on_disconnect"):
            return None
        refused = await api.access.check(Rule.ACT, request)
        if refused is not None:
            raise HTTPException(
                refused.status_code,
                "cancel_on_disconnect cancels the run, which only who may act on the thread "
                "may do: " + json.loads(bytes(refused.body)).get("detail", ""),
            )
        return caller_of(request).name

    async def join(request: Request) -> Response:
        run = await one(request)
        leave = await cancelling_reader(request)
        done = await finished(run.run_id, request if leave else None, leave)
        return JSONResponse(await api.call(outcome, done))

    async def join_stream(request: Request) -> Response:
        run = await one(request)
        leave = await cancelling_reader(request)
        raw = query_modes(request.query_params.getlist("stream_mode"))
        modes = sorted(modes_of(raw)) if raw else None
        after = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
        return stream_response(run, modes, leave, after)

    async def cancel(request: Request, actor: str) -> Response:
        refuse_action(request)
        run = await one(request)
        if run.status in FINAL_RUN:
            # Nothing to cancel, as LangGraph's server answers (and nothing is recorded).
            raise HTTPException(
                404,
                f"No matching runs to cancel: run {run.run_id} has ended ({run.status}); "
                f"GET /threads/{run.thread_id}/runs/{run.run_id} shows it",
            )
        await cancel_run(api, run, actor)
        if request.query_params.get("wait") in ("1", "true"):
            run = await finished(run.run_id)
            return JSONResponse(run_json(run))
        return Response(status_code=202)

    base = "/threads/{thread_id}/runs"
    return [
        Route("/runs", api.actor(create_run), methods=["POST"]),
        Route("/runs/stream", api.actor(stream_run), methods=["POST"]),
        Route("/runs/wait", api.actor(wait_run), methods=["POST"]),
        Route(base, api.actor(create_run), methods=["POST"]),
        Route(base, api.reader(list_runs), methods=["GET"]),
        Route(base + "/stream", api.actor(stream_run), methods=["POST"]),
        Route(base + "/wait", api.actor(wait_run), methods=["POST"]),
        Route(base + "/{run_id}", api.reader(get_run), methods=["GET"]),
        Route(base + "/{run_id}/join", api.reader(join), methods=["GET"]),
        Route(base + "/{run_id}/stream", api.reader(join_stream), methods=["GET"]),
        Route(base + "/{run_id}/cancel", api.actor(cancel), methods=["POST"]),
    ]
