"""OpenAI's chat-completions wire format: completions, stream chunks, error bodies.

Kept apart from the server so each stays small; field names and shapes follow the openai
client's ``ChatCompletion`` / ``ChatCompletionChunk`` models, which ChatOpenAI parses.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .openai_server import Reply, Request

# A fixed timestamp: real values would make otherwise identical answers differ between runs.
CREATED = 1_700_000_000
FINGERPRINT = "fp_fake0001"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def error_body(
    message: str, *, type_: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def _call_id(request: Request, index: int, name: str, args: dict[str, Any]) -> str:
    # From the request only, so a repeated request (e.g. after a crash) gets the same ids.
    return "call_" + sha(f"{request.turn}|{index}|{name}|{canonical(args)}")[:12]


def completion(request: Request, reply: Reply) -> dict[str, Any]:
    tool_calls = [
        {
            "id": _call_id(request, i, name, args),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for i, (name, args) in enumerate(reply.calls)
    ]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.content if reply.content or not tool_calls else None,
        "refusal": None,
    }
    if tool_calls:
        message["tool_calls"] = tool_calls
    if reply.usage is not None:
        prompt, output = reply.usage
    else:
        prompt = max(1, len(canonical(request.messages)) // 4)
        output = max(1, (len(reply.content) + len(canonical(reply.calls))) // 4)
    return {
        # Deterministic: the same request answered the same way gets the same id.
        "id": "chatcmpl-" + sha(request.key + canonical(dataclasses.asdict(reply)))[:24],
        "object": "chat.completion",
        "created": CREATED,
        "model": reply.model or request.model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
        "system_fingerprint": FINGERPRINT,
    }


def chunks(body: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The completion ``body`` as OpenAI's stream chunks: role, content pieces, tool-call pieces,
    finish_reason, then (if asked) a usage chunk with no choices."""
    choice = body["choices"][0]
    message = choice["message"]
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": "", "refusal": None}]
    # Several pieces, so the client's accumulation is exercised, not just one delta.
    deltas += [{"content": p} for p in re.findall(r"\S+\s*|\s+", message["content"] or "")]
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        first = {"index": i, "id": call["id"], "type": "function"}
        deltas.append(
            {"tool_calls": [{**first, "function": {"name": fn["name"], "arguments": ""}}]}
        )
        args = fn["arguments"]
        deltas += [
            {"tool_calls": [{"index": i, "function": {"arguments": args[j : j + 8]}}]}
            for j in range(0, len(args), 8)
        ]
    head = {k: body[k] for k in ("id", "created", "model", "system_fingerprint")}
    head["object"] = "chat.completion.chunk"
    extra = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        return {**head, "choices": choices, **extra}

    out = [chunk(d, None) for d in deltas] + [chunk({}, choice["finish_reason"])]
    if include_usage:
        out.append({**head, "choices": [], "usage": body["usage"]})
    return out
