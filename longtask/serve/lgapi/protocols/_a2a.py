"""A2A (the Agent2Agent protocol) as LangGraph's server serves it: each assistant is an
agent with a card (``/.well-known/agent-card.json?assistant_id=...``, and under
``/a2a/{assistant_id}``) and a JSON-RPC 2.0 endpoint, ``POST /a2a/{assistant_id}``.

Methods, by their protocol 0.3 names (answered in the spec's lowercase enums) and their
1.0 names (answered with LangGraph's ``TASK_STATE_*`` enums), as LangGraph's server takes
both: ``message/send`` (``SendMessage``) starts a thread from the message's parts (text
parts become the chat's ``messages``, data parts the task's inputs) or, with the
``taskId`` and ``contextId`` of a task that waits (``input-required``), answers its pause:
a data part ``{"resume": ...}``, or the text (``approve``, ``reject``) for an approval.
``message/stream`` does the same and answers the task as it goes (SSE). ``tasks/get``
reads a task, ``tasks/cancel`` cancels it, ``GetExtendedAgentCard`` is the card;
``ListTasks`` is refused with what to use instead.

A context is a thread; a task is ``{thread_id}:{run_id}`` of the run that started it (a
longtask thread runs its task once, so a thread holds one task). No request runs a task:
``message/send`` records the run through the same checks as ``/runs`` (``api.prepare``),
the executor carries it out, and the request waits for the run to end as ``/runs/wait``
does (``configuration.blocking: false`` answers at once, for a long task).

Who may do what: the routes are for any caller who is signed in (``serve.access``), and
each method asks the same ``Access`` what the route it stands for would: starting a task
is acting (not for viewers), answering a pause needs answering it, reading needs seeing
the thread (a thread the caller may not see is "task not found"), cancelling is acting.
The JSON (the envelope, the card, messages and parts) is ``_a2a_shapes``'s.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from longtask.errors import LongTaskError, TooLateToCancel
from longtask.serve._executor import FINAL_RUN
from longtask.serve.access import Answering, Caller, caller_of, signed_in
from longtask.serve.lgapi._state import thread_state
from longtask.serve.lgapi.protocols._a2a_shapes import (
    ALIASES,
    INVALID_PARAMS,
    INVALID_REQUEST,
    KNOWN,
    MAX_HISTORY,
    NOT_CANCELABLE,
    NOT_FOUND_METHOD,
    PARSE_ERROR,
    SPEC_STATE,
    TASK_NOT_FOUND,
    TERMINAL,
    UNSUPPORTED,
    RpcError,
    accepts,
    agent_card,
    agent_message,
    answer_parts,
    card_error,
    check_scope,
    in_spec,
    messages_of,
    now,
    parts_of,
    rpc_error,
)
from longtask.serve.lgapi.resources._assistants import _schemas

if TYPE_CHECKING:
    from longtask.serve._registry import Registered
    from longtask.serve.lgapi._common import Api
    from longtask.store._apiruns import ApiRun

#: seconds between reads of a run's status while message/send waits for it to end
_POLL = 0.1
_ORDER = ("none", "read", "answer", "act")
#: seconds between reads of a streamed run's conversation (each read builds its state)
_STREAM_POLL = 0.5


class A2aEndpoint:
    """The A2A routes of ``longtask serve``."""

    def __init__(self, api: Api) -> None:
        self.api = api

    def routes(self) -> list[Route]:
        one = "/a2a/{assistant_id}"
        return [
            Route("/.well-known/agent-card.json", signed_in(self.card_by_query), methods=["GET"]),
            Route(one, signed_in(self.endpoint), methods=["GET", "POST", "DELETE"]),
            Route(one + "/", signed_in(self.endpoint), methods=["GET", "POST", "DELETE"]),
            Route(one + "/.well-known/agent-card.json", signed_in(self.card), methods=["GET"]),
            Route(one + "/.well-known/agent.json", signed_in(self.card), methods=["GET"]),
        ]

    # -- the card -----------------------------------------------------------------------

    async def card_by_query(self, request: Request) -> Response:
        key = request.query_params.get("assistant_id")
        if not key:
            return card_error("Missing required query parameter: assistant_id")
        return self._card_response(request, key)

    async def card(self, request: Request) -> Response:
        return self._card_response(request, request.path_params["assistant_id"])

    def _card_response(self, request: Request, key: str) -> Response:
        entry = self.api.registry.find(key)
        if entry is None:
            return card_error(f"Assistant '{key}' not found")
        return JSONResponse(agent_card(request, entry))

    # -- JSON-RPC -----------------------------------------------------------------------

    async def endpoint(self, request: Request) -> Response:
        if request.method == "GET":
            return await self.card(request)
        if request.method != "POST":
            return Response(status_code=405)
        try:
            message = json.loads(await request.body())
        except ValueError:
            return rpc_error(PARSE_ERROR, "Invalid JSON payload")
        if not isinstance(message, dict):
            return rpc_error(INVALID_REQUEST, "Invalid message format: expected object")
        id_ = message.get("id")
        if message.get("jsonrpc") != "2.0":
            return rpc_error(INVALID_REQUEST, "Invalid JSON-RPC message: jsonrpc must be 2.0", id_)
        if id_ is not None and not isinstance(id_, str | int | float):
            return rpc_error(INVALID_REQUEST, "'id' must be a string, number, or null")
        method = message.get("method")
        spec = isinstance(method, str) and method in ALIASES
        method = ALIASES.get(method, method) if isinstance(method, str) else method
        if method is None or id_ is None:
            return rpc_error(INVALID_REQUEST, "a JSON-RPC request needs an id and a method", id_)
        if not isinstance(method, str) or method not in KNOWN:
            return rpc_error(NOT_FOUND_METHOD, f"Method not found: {method}", id_)
        params = message.get("params", {})
        if not isinstance(params, dict):
            return rpc_error(INVALID_PARAMS, "Invalid params: must be an object", id_)
        if method == "SendStreamingMessage":
            if not accepts(request.headers.get("accept") or "", "text/event-stream"):
                return JSONResponse(
                    {"error": "Accept header must include text/event-stream for streaming"}, 400
                )
            return self._stream(request, params, id_, spec)
        if not accepts(request.headers.get("accept") or "", "application/json"):
            return JSONResponse({"error": "Accept header must include application/json"}, 400)
        try:
            result = await self._call(request, method, params)
        except RpcError as exc:
            return rpc_error(exc.code, exc.message, id_)
        body = {"jsonrpc": "2.0", "id": id_, "result": result}
        return JSONResponse(in_spec(body) if spec else body)

    def _entry(self, request: Request) -> Registered:
        key = request.path_params["assistant_id"]
        entry = self.api.registry.find(key)
        if entry is None:
            raise RpcError(INVALID_PARAMS, f"Assistant '{key}' not found")
        return entry

    async def _call(self, request: Request, method: str, params: dict[str, Any]) -> Any:
        entry = self._entry(request)
        caller = caller_of(request)
        if method == "GetExtendedAgentCard":
            return agent_card(request, entry)
        if method == "ListTasks":
            raise RpcError(
                UNSUPPORTED,
                "ListTasks is not served by longtask: read a task with tasks/get, or list "
                "threads with POST /threads/search",
            )
        try:
            if method == "SendMessage":
                return await self._send(request, entry, params, caller)
            if method == "GetTask":
                check_scope(params, request)
                return await self._get(entry, params, caller)
            return await self._cancel(entry, params, caller)
        except (LongTaskError, HTTPException) as exc:
            raise RpcError(INVALID_PARAMS, _why(exc)) from None

    # -- who may ------------------------------------------------------------------------

    async def _level(self, caller: Caller, thread_id: str, needed: str = "act") -> str | None:
        return await self.api.access.level_for(caller, thread_id, needed)

    async def _may(self, caller: Caller, thread_id: str, needed: str, task_id: str) -> str:
        """As the route the method stands for would be checked: a task whose thread the
        caller may not see is not found; one they see but may not ``needed`` is refused.
        Returns the caller's level on the thread."""
        level = await self._level(caller, thread_id, needed)
        if level is None or level == "none":
            raise RpcError(TASK_NOT_FOUND, f"Task not found: {task_id}")
        if _ORDER.index(level) < _ORDER.index(needed):
            raise RpcError(INVALID_PARAMS, f"{caller.name!r} may not {needed} task {task_id!r}")
        return level

    # -- tasks --------------------------------------------------------------------------

    def _resolve(self, entry: Registered, task_id: Any, context_id: Any) -> tuple[str, ApiRun]:
        """The thread and the run that started task ``task_id`` (``{thread}:{run}``)."""
        if not isinstance(task_id, str) or not task_id:
            raise RpcError(INVALID_PARAMS, "Missing required parameter: id (task_id)")
        if context_id is not None and not isinstance(context_id, str):
            raise RpcError(INVALID_PARAMS, "Task id and contextId must be strings")
        thread_id, _, run_id = task_id.rpartition(":")
        thread_id = thread_id or (context_id or "")
        run = self.api.runner.db.store.api_run(run_id) if thread_id else None
        if (
            run is None
            or run.thread_id != thread_id
            or (context_id and context_id != thread_id)
            or run.assistant_id != entry.assistant_id
        ):
            raise RpcError(TASK_NOT_FOUND, f"Task not found: {task_id}")
        return thread_id, run

    def _state(self, thread_id: str) -> str:
        """The A2A state of the thread's task, from its latest run and its status."""
        store = self.api.runner.db.store
        latest = store.api_runs(thread_id, limit=1)
        rec = store.get_thread(thread_id)
        status = rec.status if rec is not None else None
        if status == "cancelled":
            return "TASK_STATE_CANCELED"
        if status == "failed":
            return "TASK_STATE_FAILED"
        run_status = latest[0].status if latest else "success"
        if run_status == "pending":
            return "TASK_STATE_SUBMITTED"
        if run_status == "running" or status in ("running", "cancelling"):
            return "TASK_STATE_WORKING"
        if status in ("waiting_user", "waiting_external"):
            # still waiting, even after a run that failed (a queued answer that no longer
            # fitted): the pause can be answered
            return "TASK_STATE_INPUT_REQUIRED"
        if run_status in ("error", "timeout"):
            return "TASK_STATE_FAILED"
        if run_status == "interrupted":
            return "TASK_STATE_CANCELED"
        if status == "completed":
            return "TASK_STATE_COMPLETED"
        return "TASK_STATE_SUBMITTED"  # recorded; the executor has not started it

    def _values(self, thread_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        rec = self.api.runner.db.store.get_thread(thread_id)
        if rec is None:
            return {}, []
        state = thread_state(self.api.runner, self.api.registry, rec)
        return dict(state["values"]), list(state["interrupts"])

    def _task(
        self, entry: Registered, thread_id: str, task_id: str, run: ApiRun | None, history: Any
    ) -> dict[str, Any]:
        """The task as message/send answers it: its state, and its answer or its pause."""
        values, interrupts = self._values(thread_id)
        state = self._state(thread_id)
        out: dict[str, Any] = {"kind": "task", "id": task_id, "contextId": thread_id}
        if history != 0:
            found = messages_of(values, task_id, thread_id)
            out["history"] = found[-history:] if isinstance(history, int) else found
        out["status"] = {"state": state, "timestamp": now()}
        if state == "TASK_STATE_FAILED":
            why = (run.error if run is not None else None) or "the task failed"
            out["status"]["message"] = {
                **agent_message(f"Error executing assistant: {why}", task_id),
                "contextId": thread_id,
            }
        elif state == "TASK_STATE_INPUT_REQUIRED":
            out["artifacts"] = [
                {
                    "artifactId": str(uuid.uuid4()),
                    "name": "Interrupt",
                    "description": "Agent requires input to continue",
                    "parts": [
                        {"kind": "data", "data": {"id": i.get("id"), "value": i.get("value")}}
                        for i in interrupts
                    ],
                }
            ]
        elif state == "TASK_STATE_COMPLETED":
            out["artifacts"] = [
                {
                    "artifactId": str(uuid.uuid4()),
                    "name": "Assistant Response",
                    "description": f"Response from assistant {entry.assistant_id}",
                    "parts": answer_parts(values),
                }
            ]
        return out

    # -- message/send -------------------------------------------------------------------

    async def _record(
        self, request: Request, entry: Registered, params: dict[str, Any], caller: Caller
    ) -> tuple[ApiRun, str, Any]:
        """message/send's checks and its run, recorded: the run, the task id, the history
        length asked for."""
        configuration = params.get("configuration") or {}
        if not isinstance(configuration, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: 'configuration' must be an object")
        history = configuration.get("historyLength")
        if history is not None and (
            not isinstance(history, int) or isinstance(history, bool) or history < 0
        ):
            raise RpcError(INVALID_PARAMS, "historyLength must be a non-negative integer")
        if isinstance(history, int) and history > MAX_HISTORY:
            raise RpcError(INVALID_PARAMS, f"historyLength cannot exceed {MAX_HISTORY}")
        check_scope(configuration, request)
        message = params.get("message")
        if not isinstance(message, dict) or not message:
            raise RpcError(INVALID_PARAMS, "Missing or invalid 'message' in params")
        message_id = message.get("messageId")
        if not message_id or not isinstance(message_id, str):
            raise RpcError(INVALID_PARAMS, "Missing required 'messageId' in message")
        if not message.get("role"):
            raise RpcError(INVALID_PARAMS, "Missing required 'role' in message")
        parts = message.get("parts")
        if not isinstance(parts, list) or not parts:
            raise RpcError(INVALID_PARAMS, "Message must contain at least one part")
        texts, data = parts_of(parts)
        context_id, task_id = message.get("contextId"), message.get("taskId")
        if context_id is not None and not isinstance(context_id, str):
            raise RpcError(INVALID_PARAMS, "contextId must be a string")
        if task_id is not None and not isinstance(task_id, str):
            raise RpcError(INVALID_PARAMS, "taskId must be a string")

        command = message.get("command")
        if command is None and "resume" in data:
            command = {"resume": data.pop("resume")}
            if not (context_id and task_id):
                raise RpcError(
                    INVALID_PARAMS, "contextId and taskId are required when resuming a task"
                )
        if command is not None and not isinstance(command, dict):
            raise RpcError(INVALID_PARAMS, "command must be an object of resume")
        if task_id is not None:
            thread_id, _ = await self.api.call(self._resolve, entry, task_id, context_id)
            await self._may(caller, thread_id, "read", task_id)
            state = await self.api.call(self._state, thread_id)
            if state in TERMINAL:
                raise RpcError(UNSUPPORTED, "A terminal task cannot accept another message")
            waiting = state == "TASK_STATE_INPUT_REQUIRED"
            if command is None and waiting and texts:
                # the text answers the pause (an approval takes "approve" or "reject")
                command = {"resume": "\n".join(texts)}
            if command is None:
                raise RpcError(
                    INVALID_PARAMS,
                    f"Task is not awaiting input (state {SPEC_STATE.get(state, state)}): a "
                    "longtask thread runs its task once; follow it with tasks/get",
                )
            if not waiting:
                raise RpcError(INVALID_PARAMS, "Task is not awaiting input")
            # which pause the command answers is known when it is planned: asked there
            has = await self._may(caller, thread_id, "answer", task_id)
            answering: Answering | None = Answering(caller.name, thread_id, has)
            body: dict[str, Any] = {"command": command, "metadata": {"a2a": {"task_id": task_id}}}
        else:
            if command is not None:
                raise RpcError(INVALID_PARAMS, "taskId is required when resuming a task")
            thread_id = context_id or str(uuid.uuid4())
            level = await self._level(caller, thread_id)
            if level == "none":
                # Taken by a thread the caller may not see: said as for any such id, so it
                # tells nothing of that thread (a free id starts a task).
                raise RpcError(
                    TASK_NOT_FOUND,
                    f"context id {thread_id!r} cannot be used: choose another, or leave "
                    "contextId out for a new one",
                )
            if caller.name is None:
                raise RpcError(INVALID_PARAMS, "acting needs a bearer token: open mode only reads")
            if caller.role == "viewer" or (level is not None and level != "act"):
                raise RpcError(INVALID_PARAMS, f"{caller.name!r} may not start a task here")
            properties = (_schemas(entry)["input_schema"] or {}).get("properties") or {}
            if texts and "messages" not in properties:
                raise RpcError(
                    INVALID_PARAMS,
                    f"Assistant '{entry.assistant_id}' (graph '{entry.name}') does not support A2A "
                    "conversational messages: its inputs have no 'messages' field; send a data "
                    f"part with its inputs instead. Available input fields: {sorted(properties)}",
                )
            role = "human" if str(message.get("role")).lower() in ("user", "role_user") else "ai"
            inputs = dict(data)
            if texts:
                inputs["messages"] = [
                    {"role": role, "content": text, "id": message_id} for text in texts
                ]
            body = {"input": inputs, "if_not_exists": "create", "metadata": {"a2a": {}}}
            answering = None  # a new task answers nothing
        if caller.name is None:
            raise RpcError(INVALID_PARAMS, "acting needs a bearer token: open mode only reads")
        prepare = self.api.prepare
        assert prepare is not None, "the runs' routes are built first"
        # with LangGraph's auth handlers, asked as for POST /threads/{id}/runs (an owner)
        metadata = await self.api.access.run_metadata(caller, thread_id, entry.assistant_id, body)
        if metadata is not None:
            body = {**body, "metadata": metadata}
        run = await self.api.call(prepare, thread_id, entry, body, caller.name, None, answering)
        return run, task_id or f"{run.thread_id}:{run.run_id}", history

    async def _send(
        self, request: Request, entry: Registered, params: dict[str, Any], caller: Caller
    ) -> dict[str, Any]:
        run, task_id, history = await self._record(request, entry, params, caller)
        if (params.get("configuration") or {}).get("blocking", True) is not False:
            run = await self._finished(run)
        return await self.api.call(self._task, entry, run.thread_id, task_id, run, history)

    def _stream(self, request: Request, params: dict[str, Any], id_: Any, spec: bool) -> Response:
        """message/stream: the run recorded as for message/send, then its task as it goes
        (submitted, working) and as it ends (its answer or its pause, then the final
        state), one JSON-RPC answer an SSE event; an error is one too."""

        def event(result: dict[str, Any] | None, error: RpcError | None = None) -> bytes:
            body: dict[str, Any] = {"jsonrpc": "2.0", "id": id_}
            if error is not None:
                body["error"] = {"code": error.code, "message": error.message}
            else:
                body["result"] = result
            data = json.dumps(in_spec(body) if spec else body, default=str)
            return f"event: message\ndata: {data}\n\n".encode()

        async def events() -> AsyncIterator[bytes]:
            try:
                entry = self._entry(request)
                sent = params.get("message")
                # the messages said before this one: not news on this stream
                context = sent.get("contextId") if isinstance(sent, dict) else None
                seen = await self.api.call(self._said, context)
                run, task_id, _ = await self._record(request, entry, params, caller_of(request))
            except RpcError as exc:
                yield event(None, exc)
                return
            except (LongTaskError, HTTPException) as exc:
                yield event(None, RpcError(INVALID_PARAMS, _why(exc)))
                return
            ids = {"taskId": task_id, "contextId": run.thread_id}
            first = {"kind": "task", "id": task_id, "contextId": run.thread_id}
            yield event(
                {
                    **first,
                    "history": [{"kind": "message", **(sent or {}), **ids}],
                    "status": {"state": "TASK_STATE_SUBMITTED", "timestamp": now()},
                }
            )
            working = {"state": "TASK_STATE_WORKING"}
            store = self.api.runner.db.store
            while True:
                # each new message of the agent (a tool's result as data) as it is recorded
                found = await self.api.call(store.api_run, run.run_id)
                values, _ = await self.api.call(self._values, run.thread_id)
                for said in messages_of(values, task_id, run.thread_id):
                    if said["role"] == "ROLE_USER" or said["messageId"] in seen:
                        continue
                    seen.add(said["messageId"])
                    status = {**working, "message": said, "timestamp": now()}
                    yield event({**ids, "kind": "status-update", "status": status, "final": False})
                if found is None or found.status in FINAL_RUN:
                    break
                await anyio.sleep(_STREAM_POLL)
            task = await self.api.call(self._task, entry, run.thread_id, task_id, found, 0)
            for artifact in task.get("artifacts", []):
                yield event({**ids, "kind": "artifact-update", "artifact": artifact})
            last = {**ids, "kind": "status-update", "status": task["status"], "final": True}
            yield event(last)

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    def _said(self, thread_id: Any) -> set[str]:
        if not isinstance(thread_id, str) or self.api.runner.db.store.get_thread(thread_id) is None:
            return set()
        values, _ = self._values(thread_id)
        return {m["messageId"] for m in messages_of(values, "", thread_id)}

    async def _finished(self, run: ApiRun) -> ApiRun:
        store = self.api.runner.db.store
        while True:
            found = await self.api.call(store.api_run, run.run_id)
            if found is None or found.status in FINAL_RUN:
                return found or run
            await anyio.sleep(_POLL)

    # -- tasks/get, tasks/cancel --------------------------------------------------------

    async def _task_of(
        self, entry: Registered, params: dict[str, Any], caller: Caller, needed: str
    ) -> tuple[str, str, ApiRun]:
        """The task ``params`` name (its id, thread and run), once the caller may do what
        ``needed`` says with it (else the RpcError the doors answer with)."""
        task_id = params.get("id")
        thread_id, run = await self.api.call(self._resolve, entry, task_id, params.get("contextId"))
        assert isinstance(task_id, str)
        await self._may(caller, thread_id, needed, task_id)
        return task_id, thread_id, run

    async def _get(
        self, entry: Registered, params: dict[str, Any], caller: Caller
    ) -> dict[str, Any]:
        task_id, thread_id, run = await self._task_of(entry, params, caller, "read")
        history = params.get("historyLength")
        if history is not None and (not isinstance(history, int) or history < 0):
            raise RpcError(INVALID_PARAMS, "historyLength must be a non-negative integer")
        task = await self.api.call(self._task, entry, thread_id, task_id, run, history)
        task.pop("artifacts", None)  # as LangGraph's tasks/get: the state, not the answer
        state = task["status"]["state"]
        if state == "TASK_STATE_COMPLETED":
            task["status"]["message"] = agent_message("Task completed successfully", task_id)
        return task

    async def _cancel(
        self, entry: Registered, params: dict[str, Any], caller: Caller
    ) -> dict[str, Any]:
        task_id, thread_id, _ = await self._task_of(entry, params, caller, "act")
        if caller.name is None:
            raise RpcError(INVALID_PARAMS, "acting needs a bearer token: open mode only reads")
        try:
            await self.api.call(self._cancel_thread, thread_id, task_id, caller.name)
        except TooLateToCancel:
            raise RpcError(NOT_CANCELABLE, "Task is not cancelable in its current state") from None
        return {
            "kind": "task",
            "id": task_id,
            "contextId": thread_id,
            "status": {
                "state": "TASK_STATE_CANCELED",
                "timestamp": now(),
                "message": agent_message("Task was canceled", task_id),
            },
        }

    def _cancel_thread(self, thread_id: str, task_id: str, by: str) -> None:
        """Cancel as the other doors do: a run in progress stops at its next step (and
        compensates), a paused thread's cancel is recorded as a run for the executor."""
        from longtask.serve.lgapi._runs import record

        if self._state(thread_id) in TERMINAL:
            raise TooLateToCancel(thread_id, "ended")
        api, runner = self.api, self.api.runner
        reason = f"A2A task {task_id} cancelled"
        for run in runner.db.store.api_runs_open_of(thread_id):
            if run.status == "pending":
                api.executor.end_run(run, "interrupted", None)
        rec = runner.reads.thread(thread_id)
        if rec.status in ("running", "cancelling"):
            runner.record_cancel(thread_id, reason=reason, by=by)
            api.executor.submit_cancel(thread_id, reason, by)
        elif runner.served_by_workers(rec):
            runner.cancel(thread_id, reason=reason, by=by)
        else:
            entry = api.registry.find(rec.task_name)
            assistant = entry.assistant_id if entry is not None else rec.task_name
            record(api, thread_id, assistant, {"kind": "cancel", "reason": reason}, by)


def _why(exc: LongTaskError | HTTPException) -> str:
    return str(exc.detail) if isinstance(exc, HTTPException) else str(exc)
