"""A2A (the Agent2Agent protocol) as LangGraph's server serves it: each assistant is an
agent with a card (``/.well-known/agent-card.json?assistant_id=...``, and under
``/a2a/{assistant_id}``) and a JSON-RPC 2.0 endpoint, ``POST /a2a/{assistant_id}``.

Methods, by their protocol 0.3 names (answered in the spec's lowercase enums) and their
1.0 names (answered with LangGraph's ``TASK_STATE_*`` enums), as LangGraph's server takes
both: ``message/send`` (``SendMessage``) starts a thread from the message's parts (text
parts become the chat's ``messages``, data parts the task's inputs) or, with the
``taskId`` and ``contextId`` of a task that waits (``input-required``), answers its pause:
a data part ``{"resume": ...}``, or the text (``approve``, ``reject``) for an approval.
``tasks/get`` reads a task, ``tasks/cancel`` cancels it, ``GetExtendedAgentCard`` is the
card. ``message/stream`` and ``ListTasks`` are refused with the method to use instead.

A context is a thread; a task is ``{thread_id}:{run_id}`` of the run that started it (a
longtask thread runs its task once, so a thread holds one task). No request runs a task:
``message/send`` records the run through the same checks as ``/runs`` (``api.prepare``),
the executor carries it out, and the request waits for the run to end as ``/runs/wait``
does (``configuration.blocking: false`` answers at once, for a long task).

Who may do what: the routes are for any caller who is signed in (``serve._access``), and
each method asks the same ``Access`` what the route it stands for would: starting a task
is acting (not for viewers), answering a pause needs answering it, reading needs seeing
the thread (a thread the caller may not see is "task not found"), cancelling is acting.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from longtask._version import __version__
from longtask.errors import LongTaskError, TooLateToCancel
from longtask.serve._access import Caller, caller_of, signed_in
from longtask.serve._executor import FINAL_RUN
from longtask.serve.lgapi._assistants import _schemas
from longtask.serve.lgapi._state import thread_state

if TYPE_CHECKING:
    from longtask.serve._registry import Registered
    from longtask.serve.lgapi._common import Api
    from longtask.store._apiruns import ApiRun

PARSE_ERROR, INVALID_REQUEST, NOT_FOUND_METHOD, INVALID_PARAMS = -32700, -32600, -32601, -32602
TASK_NOT_FOUND, NOT_CANCELABLE, UNSUPPORTED, CONTENT_TYPE = -32001, -32002, -32004, -32005
#: the 0.3 names a client of the A2A SDK sends, and the 1.0 names they stand for
ALIASES = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
}
KNOWN = {*ALIASES.values(), "ListTasks", "GetExtendedAgentCard"}
_SPEC_STATE = {
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
}
_SPEC_ROLE = {"ROLE_USER": "user", "ROLE_AGENT": "agent"}
_TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"}
MAX_HISTORY = 10
_POLL = 0.1
_MODES = ["application/json", "text/plain"]
_ORDER = ("none", "read", "answer", "act")
SCOPE_URI = "https://langchain.com/a2a/extensions/history-scope/v1"
SCOPE_HEADER = "LangGraph-A2A-History-Scope"


class RpcError(Exception):
    """A JSON-RPC error answered with HTTP 200, as the protocol says."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _rpc_error(code: int, message: str, id_: Any = None) -> Response:
    return JSONResponse({"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}})


def _accepts(header: str, wanted: str) -> bool:
    for item in header.split(","):
        kind = item.split(";", 1)[0].strip().lower()
        if kind in ("*/*", wanted) or (kind.endswith("/*") and wanted.startswith(kind[:-1])):
            return True
    return False


def _spec(value: Any) -> Any:
    """The 1.0 enums (``TASK_STATE_*``, ``ROLE_*``) in the 0.3 spelling a 0.3 client reads."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "state" and isinstance(v, str):
                out[k] = _SPEC_STATE.get(v, v)
            elif k == "role" and isinstance(v, str):
                out[k] = _SPEC_ROLE.get(v, v)
            else:
                out[k] = _spec(v)
        return out
    if isinstance(value, list):
        return [_spec(v) for v in value]
    return value


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _agent_message(text: str, task_id: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "ROLE_AGENT",
        "parts": [{"kind": "text", "text": text}],
        "messageId": str(uuid.uuid4()),
        "taskId": task_id,
    }


def _role(message: Any) -> str | None:
    if not isinstance(message, dict):
        return None
    kind = str(message.get("type") or message.get("role") or "").lower()
    if kind in ("human", "user"):
        return "ROLE_USER"
    if kind in ("ai", "assistant"):
        return "ROLE_AGENT"
    return None


def _tool_result(message: Any) -> list[dict[str, Any]]:
    """A tool's result as a data part (never as the agent's words), as LangGraph's server
    publishes it; other internal messages (system prompts) not at all."""
    call = message.get("tool_call_id") if isinstance(message, dict) else None
    if not isinstance(call, str) or not call:
        return []
    found: dict[str, Any] = {"toolCallId": call}
    if message.get("content") not in (None, ""):
        found["content"] = message["content"]
    found.update({k: message[k] for k in ("name", "status") if isinstance(message.get(k), str)})
    return [{"kind": "data", "data": {"tool_results": [found]}}]


def _text_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"kind": "text", "text": content}] if content else []
    if isinstance(content, list):
        out: list[dict[str, Any]] = []
        for block in content:
            if isinstance(block, str) and block:
                out.append({"kind": "text", "text": block})
            elif isinstance(block, dict) and block.get("type") == "text" and block.get("text"):
                out.append({"kind": "text", "text": str(block["text"])})
        return out
    return []


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
            return _card_error("Missing required query parameter: assistant_id")
        return self._card_response(request, key)

    async def card(self, request: Request) -> Response:
        return self._card_response(request, request.path_params["assistant_id"])

    def _card_response(self, request: Request, key: str) -> Response:
        entry = self.api.registry.find(key)
        if entry is None:
            return _card_error(f"Assistant '{key}' not found")
        return JSONResponse(self._card(request, entry))

    def _card(self, request: Request, entry: Registered) -> dict[str, Any]:
        schema = _schemas(entry)["input_schema"]
        properties = schema.get("properties") or {}
        url = request.url
        base = f"{request.headers.get('x-forwarded-proto') or url.scheme}://{url.netloc}"
        path = url.path.removesuffix("/.well-known/agent-card.json").removesuffix(
            "/.well-known/agent.json"
        )
        path = path.rstrip("/").removesuffix(f"/a2a/{request.path_params.get('assistant_id')}")
        agent_url = f"{base}{path}/a2a/{entry.assistant_id}"
        description = f"{entry.name} assistant"
        return {
            "name": entry.name,
            "description": description,
            "url": agent_url,
            "supportedInterfaces": [
                {"url": agent_url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            ],
            # No streaming: message/send answers when the run ends (or at once, with
            # blocking false), and tasks/get follows it; a client then never asks to stream.
            "capabilities": {
                "streaming": False,
                "pushNotifications": False,
                "stateTransitionHistory": False,
                # A context holds one task (a thread runs its task once): either scope
                # gives the same history, and both are taken.
                "extensions": [
                    {
                        "uri": SCOPE_URI,
                        "description": "Choose task-only or full-context response history",
                        "required": False,
                        "params": {
                            "header": SCOPE_HEADER,
                            "values": ["context", "task"],
                            "default": "context",
                            "methods": ["SendMessage", "GetTask"],
                        },
                    }
                ],
            },
            "defaultInputModes": list(_MODES),
            "defaultOutputModes": list(_MODES),
            "skills": [
                {
                    "id": f"{entry.assistant_id}-main",
                    "name": f"{entry.name} Capabilities",
                    "description": description,
                    "tags": ["assistant", "langgraph", "longtask"],
                    "examples": [],
                    "inputModes": list(_MODES),
                    "outputModes": list(_MODES),
                    "metadata": {
                        "inputSchema": {
                            "required": list(schema.get("required") or []),
                            "properties": sorted(properties),
                            "supportsA2A": "messages" in properties,
                        }
                    },
                }
            ],
            "version": __version__,
        }

    # -- JSON-RPC -----------------------------------------------------------------------

    async def endpoint(self, request: Request) -> Response:
        if request.method == "GET":
            return await self.card(request)
        if request.method != "POST":
            return Response(status_code=405)
        try:
            message = json.loads(await request.body())
        except ValueError:
            return _rpc_error(PARSE_ERROR, "Invalid JSON payload")
        if not isinstance(message, dict):
            return _rpc_error(INVALID_REQUEST, "Invalid message format: expected object")
        id_ = message.get("id")
        if message.get("jsonrpc") != "2.0":
            return _rpc_error(INVALID_REQUEST, "Invalid JSON-RPC message: jsonrpc must be 2.0", id_)
        if id_ is not None and not isinstance(id_, str | int | float):
            return _rpc_error(INVALID_REQUEST, "'id' must be a string, number, or null")
        method = message.get("method")
        spec = isinstance(method, str) and method in ALIASES
        method = ALIASES.get(method, method) if isinstance(method, str) else method
        if method is None or id_ is None:
            return _rpc_error(INVALID_REQUEST, "a JSON-RPC request needs an id and a method", id_)
        if not isinstance(method, str) or method not in KNOWN:
            return _rpc_error(NOT_FOUND_METHOD, f"Method not found: {method}", id_)
        params = message.get("params", {})
        if not isinstance(params, dict):
            return _rpc_error(INVALID_PARAMS, "Invalid params: must be an object", id_)
        if not _accepts(request.headers.get("accept") or "", "application/json"):
            return JSONResponse({"error": "Accept header must include application/json"}, 400)
        try:
            result = await self._call(request, method, params)
        except RpcError as exc:
            return _rpc_error(exc.code, exc.message, id_)
        body = {"jsonrpc": "2.0", "id": id_, "result": result}
        return JSONResponse(_spec(body) if spec else body)

    async def _call(self, request: Request, method: str, params: dict[str, Any]) -> Any:
        key = request.path_params["assistant_id"]
        entry = self.api.registry.find(key)
        if entry is None:
            raise RpcError(INVALID_PARAMS, f"Assistant '{key}' not found")
        caller = caller_of(request)
        if method == "GetExtendedAgentCard":
            return self._card(request, entry)
        if method == "SendStreamingMessage":
            raise RpcError(
                UNSUPPORTED,
                "message/stream is not served by longtask: send message/send (it answers "
                "when the run ends, or at once with configuration.blocking false) and "
                "follow the task with tasks/get",
            )
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
                _check_scope(params, request)
                return await self._get(entry, params, caller)
            return await self._cancel(entry, params, caller)
        except LongTaskError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from None
        except HTTPException as exc:
            raise RpcError(INVALID_PARAMS, str(exc.detail)) from None

    # -- who may ------------------------------------------------------------------------

    async def _level(self, caller: Caller, thread_id: str) -> str | None:
        return await self.api.call(self.api.access.level, caller, thread_id)

    async def _may(self, caller: Caller, thread_id: str, needed: str, task_id: str) -> None:
        """As the route the method stands for would be checked: a task whose thread the
        caller may not see is not found; one they see but may not ``needed`` is refused."""
        level = await self._level(caller, thread_id)
        if level is None or level == "none":
            raise RpcError(TASK_NOT_FOUND, f"Task not found: {task_id}")
        if _ORDER.index(level) < _ORDER.index(needed):
            raise RpcError(INVALID_PARAMS, f"{caller.name!r} may not {needed} task {task_id!r}")

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
        if run_status in ("error", "timeout"):
            return "TASK_STATE_FAILED"
        if run_status == "interrupted":
            return "TASK_STATE_CANCELED"
        if status in ("waiting_user", "waiting_external"):
            return "TASK_STATE_INPUT_REQUIRED"
        if status == "completed":
            return "TASK_STATE_COMPLETED"
        return "TASK_STATE_SUBMITTED"  # recorded; the executor has not started it

    def _values(self, thread_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        rec = self.api.runner.db.store.get_thread(thread_id)
        if rec is None:
            return {}, []
        state = thread_state(self.api.runner, self.api.registry, rec)
        return dict(state["values"]), list(state["interrupts"])

    def _history(self, values: dict[str, Any], task_id: str, thread_id: str) -> list[Any]:
        """The thread's conversation as A2A messages (tool calls and results left out)."""
        out = []
        for message in values.get("messages") or []:
            role = _role(message)
            parts = _text_parts(message.get("content")) if role else _tool_result(message)
            if not parts:
                continue
            out.append(
                {
                    "kind": "message",
                    "role": role or "ROLE_AGENT",
                    "parts": parts,
                    "messageId": message.get("id") or str(uuid.uuid4()),
                    "taskId": task_id,
                    "contextId": thread_id,
                }
            )
        return out

    def _task(
        self, entry: Registered, thread_id: str, task_id: str, run: ApiRun | None, history: Any
    ) -> dict[str, Any]:
        """The task as message/send answers it: its state, and its answer or its pause."""
        values, interrupts = self._values(thread_id)
        state = self._state(thread_id)
        out: dict[str, Any] = {"kind": "task", "id": task_id, "contextId": thread_id}
        if history != 0:
            found = self._history(values, task_id, thread_id)
            out["history"] = found[-history:] if isinstance(history, int) else found
        out["status"] = {"state": state, "timestamp": _now()}
        if state == "TASK_STATE_FAILED":
            why = (run.error if run is not None else None) or "the task failed"
            out["status"]["message"] = {
                **_agent_message(f"Error executing assistant: {why}", task_id),
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
                    "parts": self._answer(values),
                }
            ]
        return out

    def _answer(self, values: dict[str, Any]) -> list[dict[str, Any]]:
        """The last AI message of the thread's conversation; or its values as text."""
        messages = values.get("messages")
        if not isinstance(messages, list) or not messages:
            return [{"kind": "text", "text": json.dumps(values, default=str)}]
        for message in reversed(messages):
            if _role(message) == "ROLE_USER":
                break
            if _role(message) == "ROLE_AGENT":
                parts = _text_parts(message.get("content"))
                if parts:
                    return parts
        return [{"kind": "text", "text": ""}]

    # -- message/send -------------------------------------------------------------------

    async def _send(
        self, request: Request, entry: Registered, params: dict[str, Any], caller: Caller
    ) -> dict[str, Any]:
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
        _check_scope(configuration, request)
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
        texts, data = _parts(parts)
        properties = _schemas(entry)["input_schema"].get("properties") or {}
        if texts and "messages" not in properties:
            raise RpcError(
                INVALID_PARAMS,
                f"Assistant '{entry.assistant_id}' (graph '{entry.name}') does not support A2A "
                "conversational messages: its inputs have no 'messages' field; send a data "
                f"part with its inputs instead. Available input fields: {sorted(properties)}",
            )
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
            if state in _TERMINAL:
                raise RpcError(UNSUPPORTED, "A terminal task cannot accept another message")
            waiting = state == "TASK_STATE_INPUT_REQUIRED"
            if command is None and waiting and texts:
                # the text answers the pause (an approval takes "approve" or "reject")
                command = {"resume": "\n".join(texts)}
            if command is None:
                raise RpcError(
                    INVALID_PARAMS,
                    f"Task is not awaiting input (state {_SPEC_STATE.get(state, state)}): a "
                    "longtask thread runs its task once; follow it with tasks/get",
                )
            if not waiting:
                raise RpcError(INVALID_PARAMS, "Task is not awaiting input")
            await self._may(caller, thread_id, "answer", task_id)
            body: dict[str, Any] = {"command": command, "metadata": {"a2a": {"task_id": task_id}}}
        else:
            if command is not None:
                raise RpcError(INVALID_PARAMS, "taskId is required when resuming a task")
            thread_id = context_id or str(uuid.uuid4())
            level = await self._level(caller, thread_id)
            if level == "none":
                raise RpcError(TASK_NOT_FOUND, f"no context {thread_id!r}")
            if caller.name is None:
                raise RpcError(INVALID_PARAMS, "acting needs a bearer token: open mode only reads")
            if caller.role == "viewer" or (level is not None and level != "act"):
                raise RpcError(INVALID_PARAMS, f"{caller.name!r} may not start a task here")
            role = "human" if str(message.get("role")).lower() in ("user", "role_user") else "ai"
            inputs = dict(data)
            if texts:
                inputs["messages"] = [
                    {"role": role, "content": text, "id": message_id} for text in texts
                ]
            body = {"input": inputs, "if_not_exists": "create", "metadata": {"a2a": {}}}
        if caller.name is None:
            raise RpcError(INVALID_PARAMS, "acting needs a bearer token: open mode only reads")
        prepare = self.api.prepare
        assert prepare is not None, "the runs' routes are built first"
        run = await self.api.call(prepare, thread_id, entry, body, caller.name)
        task_id = task_id or f"{run.thread_id}:{run.run_id}"
        if configuration.get("blocking", True) is not False:
            run = await self._finished(run)
        return await self.api.call(self._task, entry, run.thread_id, task_id, run, history)

    async def _finished(self, run: ApiRun) -> ApiRun:
        store = self.api.runner.db.store
        while True:
            found = await self.api.call(store.api_run, run.run_id)
            if found is None or found.status in FINAL_RUN:
                return found or run
            await anyio.sleep(_POLL)

    # -- tasks/get, tasks/cancel --------------------------------------------------------

    async def _get(
        self, entry: Registered, params: dict[str, Any], caller: Caller
    ) -> dict[str, Any]:
        task_id = params.get("id")
        thread_id, run = await self.api.call(self._resolve, entry, task_id, params.get("contextId"))
        assert isinstance(task_id, str)
        await self._may(caller, thread_id, "read", task_id)
        history = params.get("historyLength")
        if history is not None and (not isinstance(history, int) or history < 0):
            raise RpcError(INVALID_PARAMS, "historyLength must be a non-negative integer")
        task = await self.api.call(self._task, entry, thread_id, task_id, run, history)
        task.pop("artifacts", None)  # as LangGraph's tasks/get: the state, not the answer
        state = task["status"]["state"]
        if state == "TASK_STATE_COMPLETED":
            task["status"]["message"] = _agent_message("Task completed successfully", task_id)
        return task

    async def _cancel(
        self, entry: Registered, params: dict[str, Any], caller: Caller
    ) -> dict[str, Any]:
        task_id = params.get("id")
        thread_id, _ = await self.api.call(self._resolve, entry, task_id, params.get("contextId"))
        assert isinstance(task_id, str)
        await self._may(caller, thread_id, "act", task_id)
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
                "timestamp": _now(),
                "message": _agent_message("Task was canceled", task_id),
            },
        }

    def _cancel_thread(self, thread_id: str, task_id: str, by: str) -> None:
        """Cancel as the other doors do: a run in progress stops at its next step (and
        compensates), a paused thread's cancel is recorded as a run for the executor."""
        from longtask.serve.lgapi._runs import record

        if self._state(thread_id) in _TERMINAL:
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


def _parts(parts: list[Any]) -> tuple[list[str], dict[str, Any]]:
    """The texts and the data (merged) of a message's parts."""
    texts: list[str] = []
    data: dict[str, Any] = {}
    for part in parts:
        if not isinstance(part, dict):
            raise RpcError(CONTENT_TYPE, "Each message part must be an object")
        present = [k for k in ("text", "file", "data") if k in part]
        if len(present) != 1:
            raise RpcError(
                CONTENT_TYPE, "Each message part must contain exactly one of text, file or data"
            )
        if "file" in part:
            raise RpcError(
                CONTENT_TYPE,
                "file parts are not taken by longtask: send the file's content as text, or "
                "its location in a data part of the task's inputs",
            )
        if "text" in part:
            if not isinstance(part["text"], str):
                raise RpcError(CONTENT_TYPE, "a text part's text must be a string")
            texts.append(part["text"])
        elif not isinstance(part["data"], dict):
            raise RpcError(CONTENT_TYPE, "DataPart must contain a JSON object in the 'data' field")
        else:
            data.update(part["data"])
    if not texts and not data:
        raise RpcError(INVALID_PARAMS, "Message must contain at least one text or data part")
    return texts, data


def _check_scope(options: dict[str, Any], request: Request) -> None:
    scope = options.get("historyScope") or request.headers.get(SCOPE_HEADER, "context")
    if scope not in ("context", "task"):
        raise RpcError(INVALID_PARAMS, "historyScope must be 'context' or 'task'")


def _card_error(message: str) -> Response:
    return JSONResponse({"error": {"code": INVALID_PARAMS, "message": message}}, 400)
