"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests.

Standard library only (``http.server`` in a daemon thread), so subprocesses and CI need
nothing installed. Answers are deterministic functions of the request where possible (ids,
``created``, tool-call ids), so a crashed-and-restarted client that repeats a request gets
the same answer.

    with FakeOpenAI(by_turn([Reply.tool_calls([("add", {"a": 1})]), Reply.text("2")])) as srv:
        llm = ChatOpenAI(model="gpt-test", base_url=srv.base_url, api_key="sk-x")
"""

from __future__ import annotations

import collections
import dataclasses
import http.server
import json
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from .openai_wire import CREATED, canonical, chunks, completion, error_body, sha

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
MODELS_PATHS = ("/v1/models", "/models")


def _text_of(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


@dataclass(frozen=True)
class Request:
    """One chat-completions request as the server received it."""

    body: dict[str, Any]
    # Lower-cased names; Authorization is replaced by "Bearer ***" so logs never hold a key.
    headers: dict[str, str]
    path: str
    turn: int  # assistant messages already in ``messages``: 0 = first model call
    ts: float
    api_key_seen: str | None  # the bearer token the client sent, kept apart from headers
    key: str  # hash of the canonical model + messages + tools: "the same request"
    seen: int  # identical requests (same key) received before this one

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def model(self) -> str:
        return str(self.body.get("model") or "")

    def first_text(self, role: str = "user") -> str:
        """Text of the first message with ``role``, "" if none."""
        for m in self.messages:
            if m.get("role") == role:
                return _text_of(m.get("content"))
        return ""


@dataclass(frozen=True)
class Reply:
    """What to answer. Build with the constructors rather than by hand."""

    kind: Literal["text", "tool_calls", "error", "hangup"] = "text"
    content: str = ""
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    usage: tuple[int, int] | None = None  # None: estimated from the sizes, deterministically
    finish_reason: str = "stop"
    model: str | None = None  # reported model; None: the request's model
    status: int = 200
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    error_type: str = "invalid_request_error"
    code: str | None = None
    delay: float = 0.0

    @classmethod
    def text(
        cls,
        content: str,
        *,
        usage: tuple[int, int] | None = None,
        finish_reason: str = "stop",
        model: str | None = None,
    ) -> Reply:
        return cls("text", content=content, usage=usage, finish_reason=finish_reason, model=model)

    @classmethod
    def tool_calls(
        cls,
        calls: Sequence[tuple[str, dict[str, Any]]],
        *,
        content: str = "",
        usage: tuple[int, int] | None = None,
        model: str | None = None,
    ) -> Reply:
        return cls(
            "tool_calls",
            content=content,
            calls=tuple((name, dict(args)) for name, args in calls),
            usage=usage,
            finish_reason="tool_calls",
            model=model,
        )

    @classmethod
    def error(
        cls,
        status: int,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        type_: str = "invalid_request_error",
        code: str | None = None,
    ) -> Reply:
        default_code = {429: "rate_limit_exceeded", 401: "invalid_api_key"}.get(status)
        return cls(
            "error",
            status=status,
            message=message,
            headers=dict(headers or {}),
            error_type=type_,
            code=code if code is not None else default_code,
        )

    @classmethod
    def hangup(cls) -> Reply:
        """Close the connection without answering: the client cannot know the outcome."""
        return cls("hangup")

    @staticmethod
    def slow(reply: Reply, seconds: float) -> Reply:
        """``reply``, sent after ``seconds`` (interrupted when the server stops)."""
        return dataclasses.replace(reply, delay=seconds)


Answer: TypeAlias = Reply | list[Reply]
ScriptFn: TypeAlias = Callable[[Request], Answer]
Script: TypeAlias = ScriptFn | Sequence[Reply]


def by_turn(replies: Sequence[Answer]) -> ScriptFn:
    """Answer ``replies[request.turn]``; an element may be a list (for repeated requests)."""
    replies = list(replies)

    def script(request: Request) -> Answer:
        if request.turn >= len(replies):
            raise LookupError(f"no scripted reply for turn {request.turn} ({len(replies)} given)")
        return replies[request.turn]

    return script


def by_conversation(mapping: Mapping[str, Sequence[Answer]]) -> ScriptFn:
    """Pick the list whose key is a substring of the first user (else system) message, then
    answer by turn. Keys are tried in order, so put the more specific ones first."""
    scripts = {key: by_turn(replies) for key, replies in mapping.items()}

    def script(request: Request) -> Answer:
        for text in (request.first_text("user"), request.first_text("system")):
            for key, fn in scripts.items():
                if key in text:
                    return fn(request)
        raise LookupError(
            f"no conversation matches first user message {request.first_text('user')!r}; "
            f"keys: {list(scripts)}"
        )

    return script


def read_log(path: str | Path) -> list[Request]:
    """The requests appended to ``log_path`` (by this process or any other)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [Request(**json.loads(line)) for line in lines if line.strip()]


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True  # a stuck client never keeps the test process alive
    fake: FakeOpenAI


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the openai client's pool expects
    #: headers and body go out in two writes: without TCP_NODELAY the second waits for the
    #: client's delayed ACK (~40 ms a call, most of a test's model-call time)
    disable_nagle_algorithm = True
    timeout = 30  # idle keep-alive connections give up, so no thread waits forever
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # pytest output stays readable

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in MODELS_PATHS:
            models = [
                {"id": m, "object": "model", "created": CREATED, "owned_by": "fake"}
                for m in self.server.fake.model_names()
            ]
            self._send_json(200, {"object": "list", "data": models})
        else:
            self._send_json(404, error_body(f"unknown path {path}", code="not_found"))

    def do_POST(self) -> None:
        # Read the body first, whatever the path, so a keep-alive connection stays in sync.
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in CHAT_PATHS:
            self._send_json(404, error_body(f"unknown path {path}", code="not_found"))
            return
        try:
            body = json.loads(raw or b"null")
        except ValueError as exc:
            self._send_json(400, error_body(f"body is not JSON: {exc}"))
            return
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            self._send_json(400, error_body("body must be an object with a 'messages' list"))
            return
        fake = self.server.fake
        request = fake._record(path, dict(self.headers.items()), body)
        try:
            reply = fake._reply_for(request)
        except Exception:
            tb = traceback.format_exc()
            fake.script_errors.append(tb)
            self._send_json(500, error_body(f"fake script failed:\n{tb}", type_="server_error"))
            return
        if reply.delay and fake._stopping.wait(reply.delay):
            self.close_connection = True  # server stopping: drop the request
            return
        try:
            self._answer(request, reply)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. its timeout): fine

    def _answer(self, request: Request, reply: Reply) -> None:
        if reply.kind == "hangup":
            self.close_connection = True
            return
        if reply.kind == "error":
            error = error_body(reply.message, type_=reply.error_type, code=reply.code)
            self._send_json(reply.status, error, reply.headers)
            return
        body = completion(request, reply)
        if request.body.get("stream"):
            include_usage = bool((request.body.get("stream_options") or {}).get("include_usage"))
            self._send_stream(chunks(body, include_usage))
        else:
            self._send_json(200, body)

    def _send_json(self, status: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, events: list[dict[str, Any]]) -> None:
        # No length: the stream ends when the connection closes, like a plain SSE response.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for chunk in events:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class FakeOpenAI:
    """The server. ``script``: a callable ``Request -> Reply | list[Reply]`` (a list answers
    repeated identical requests in order, the last one again once exhausted), or a list of
    ``Reply`` answered one per request, in arrival order."""

    def __init__(
        self,
        script: Script,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_path: str | Path | None = None,
        models: Sequence[str] = (),
    ) -> None:
        self.script = script
        self.host, self.port = host, port
        self.log_path = Path(log_path) if log_path is not None else None
        self.models = list(models)
        self.requests: list[Request] = []
        self.script_errors: list[str] = []  # tracebacks of script exceptions (answered 500)
        self._lock = threading.Lock()
        self._seen: collections.Counter[str] = collections.Counter()
        self._cursor = 0  # next reply of a list script
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def start(self) -> FakeOpenAI:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server((self.host, self.port), _Handler)
        server.fake = self
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name=f"fake-openai:{self.port}",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # wakes slow replies
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not started")
        return f"http://{self.host}:{self.port}/v1"

    # -- the request log
    def request_count(self, predicate: Callable[[Request], bool] | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if predicate is None or predicate(r))

    def distinct(self) -> collections.Counter[str]:
        """Requests counted by key (canonical model + messages + tools)."""
        with self._lock:
            return collections.Counter(r.key for r in self.requests)

    def model_names(self) -> list[str]:
        with self._lock:
            names = self.models + [r.model for r in self.requests]
        if isinstance(self.script, Sequence):
            names += [r.model for r in self.script if r.model]
        return list(dict.fromkeys(n for n in names if n)) or ["gpt-test"]

    # -- used by the handler threads
    def _record(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Request:
        clean = {k.lower(): v for k, v in headers.items()}
        api_key: str | None = None
        auth = clean.get("authorization")
        if auth is not None:
            scheme, _, token = auth.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                api_key = token.strip()
                clean["authorization"] = "Bearer ***"
            else:
                clean["authorization"] = "***"
        if "api-key" in clean:  # Azure-style key header: never stored either
            api_key = api_key or clean["api-key"]
            clean["api-key"] = "***"
        turn = sum(
            1 for m in body["messages"] if isinstance(m, dict) and m.get("role") == "assistant"
        )
        key = sha(canonical({k: body.get(k) for k in ("model", "messages", "tools")}))[:16]
        with self._lock:
            seen = self._seen[key]
            self._seen[key] += 1
            request = Request(body, clean, path, turn, time.time(), api_key, key, seen)
            self.requests.append(request)
            if self.log_path is not None:
                with self.log_path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(dataclasses.asdict(request)) + "\n")
        return request

    def _reply_for(self, request: Request) -> Reply:
        if callable(self.script):
            answer = self.script(request)
        else:
            with self._lock:
                index, self._cursor = self._cursor, self._cursor + 1
            if index >= len(self.script):
                raise LookupError(
                    f"script exhausted: request {index + 1}, {len(self.script)} replies"
                )
            answer = self.script[index]
        if isinstance(answer, list):
            if not answer:
                raise LookupError("script answered an empty list")
            answer = answer[min(request.seen, len(answer) - 1)]
        if not isinstance(answer, Reply):
            raise TypeError(f"script answered {answer!r}, not a Reply")
        return answer
