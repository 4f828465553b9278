"""The JSON of A2A as LangGraph's server answers it, for ``_a2a``: the JSON-RPC envelope
and its errors, the agent card, a thread's conversation as A2A messages, a message's parts
as a run's input. Pure functions of JSON; who may do what and the runs are ``_a2a``'s."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from longtask._version import __version__
from longtask.serve.lgapi.resources._assistants import _schemas

if TYPE_CHECKING:
    from longtask.serve._registry import Registered

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
SPEC_STATE = {
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
}
SPEC_ROLE = {"ROLE_USER": "user", "ROLE_AGENT": "agent"}
TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"}
MAX_HISTORY = 10
MODES = ["application/json", "text/plain"]
SCOPE_URI = "https://langchain.com/a2a/extensions/history-scope/v1"
SCOPE_HEADER = "LangGraph-A2A-History-Scope"


class RpcError(Exception):
    """A JSON-RPC error answered with HTTP 200, as the protocol says."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def rpc_error(code: int, message: str, id_: Any = None) -> Response:
    return JSONResponse({"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}})


def accepts(header: str, wanted: str) -> bool:
    for item in header.split(","):
        kind = item.split(";", 1)[0].strip().lower()
        if kind in ("*/*", wanted) or (kind.endswith("/*") and wanted.startswith(kind[:-1])):
            return True
    return False


def in_spec(value: Any) -> Any:
    """The 1.0 enums (``TASK_STATE_*``, ``ROLE_*``) in the 0.3 spelling a 0.3 client reads."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "state" and isinstance(v, str):
                out[k] = SPEC_STATE.get(v, v)
            elif k == "role" and isinstance(v, str):
                out[k] = SPEC_ROLE.get(v, v)
            else:
                out[k] = in_spec(v)
        return out
    if isinstance(value, list):
        return [in_spec(v) for v in value]
    return value


def now() -> str:
    return datetime.now(UTC).isoformat()


def agent_message(text: str, task_id: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "ROLE_AGENT",
        "parts": [{"kind": "text", "text": text}],
        "messageId": str(uuid.uuid4()),
        "taskId": task_id,
    }


def role_of(message: Any) -> str | None:
    if not isinstance(message, dict):
        return None
    kind = str(message.get("type") or message.get("role") or "").lower()
    if kind in ("human", "user"):
        return "ROLE_USER"
    if kind in ("ai", "assistant"):
        return "ROLE_AGENT"
    return None


def tool_result(message: Any) -> list[dict[str, Any]]:
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


def textparts_of(content: Any) -> list[dict[str, Any]]:
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


def agent_card(request: Request, entry: Registered) -> dict[str, Any]:
    schema = _schemas(entry)["input_schema"] or {}
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
        "capabilities": {
            "streaming": True,
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
        "defaultInputModes": list(MODES),
        "defaultOutputModes": list(MODES),
        "skills": [
            {
                "id": f"{entry.assistant_id}-main",
                "name": f"{entry.name} Capabilities",
                "description": description,
                "tags": ["assistant", "langgraph", "longtask"],
                "examples": [],
                "inputModes": list(MODES),
                "outputModes": list(MODES),
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


def messages_of(values: dict[str, Any], task_id: str, thread_id: str) -> list[Any]:
    """The thread's conversation as A2A messages (tool calls and results left out)."""
    out = []
    for at, message in enumerate(values.get("messages") or []):
        role = role_of(message)
        parts = textparts_of(message.get("content")) if role else tool_result(message)
        if not parts:
            continue
        out.append(
            {
                "kind": "message",
                "role": role or "ROLE_AGENT",
                "parts": parts,
                # stable, so a stream tells a new message from one it has sent
                "messageId": message.get("id") or f"{thread_id}:{at}",
                "taskId": task_id,
                "contextId": thread_id,
            }
        )
    return out


def answer_parts(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The last AI message of the thread's conversation; or its values as text."""
    messages = values.get("messages")
    if not isinstance(messages, list) or not messages:
        return [{"kind": "text", "text": json.dumps(values, default=str)}]
    for message in reversed(messages):
        if role_of(message) == "ROLE_USER":
            break
        if role_of(message) == "ROLE_AGENT":
            parts = textparts_of(message.get("content"))
            if parts:
                return parts
    return [{"kind": "text", "text": ""}]


def parts_of(parts: list[Any]) -> tuple[list[str], dict[str, Any]]:
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


def check_scope(options: dict[str, Any], request: Request) -> None:
    scope = options.get("historyScope") or request.headers.get(SCOPE_HEADER, "context")
    if scope not in ("context", "task"):
        raise RpcError(INVALID_PARAMS, "historyScope must be 'context' or 'task'")


def card_error(message: str) -> Response:
    return JSONResponse({"error": {"code": INVALID_PARAMS, "message": message}}, 400)
