"""The scripted OpenAI server of tests/fakes, driven by the real ChatOpenAI and openai client.

No database and no outside network: everything talks to 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fakes import FakeOpenAI, Reply, Request, by_conversation, by_turn, read_log
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

KEY = "sk-test-123"


def chat(server: FakeOpenAI, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model="gpt-test", base_url=server.base_url, api_key=KEY, max_retries=0, **kwargs
    )


@pytest.fixture
def serve() -> Iterator[Any]:
    """``serve(script, **kw)`` starts a server that is stopped after the test."""
    started: list[FakeOpenAI] = []

    def start(script: Any, **kwargs: Any) -> FakeOpenAI:
        server = FakeOpenAI(script, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_text_reply_with_usage_model_and_ids(serve: Any) -> None:
    server = serve(lambda r: Reply.text("hello there", usage=(11, 4), model="gpt-test-2024-08-06"))
    llm = chat(server)
    msg = llm.invoke("hi")
    assert isinstance(msg, AIMessage)
    assert msg.content == "hello there"
    assert msg.usage_metadata is not None
    assert (msg.usage_metadata["input_tokens"], msg.usage_metadata["output_tokens"]) == (11, 4)
    assert msg.usage_metadata["total_tokens"] == 15
    assert msg.response_metadata["model_name"] == "gpt-test-2024-08-06"
    assert msg.response_metadata["finish_reason"] == "stop"
    assert msg.response_metadata["system_fingerprint"]
    assert msg.id
    response_id = msg.response_metadata["id"]
    assert response_id.startswith("chatcmpl-")
    # The same request gets the same answer, id included: what a restarted process relies on.
    again = llm.invoke("hi")
    assert again.response_metadata["id"] == response_id
    assert llm.invoke("something else").response_metadata["id"] != response_id


def test_model_defaults_to_the_requested_one(serve: Any) -> None:
    server = serve([Reply.text("x")])
    msg = chat(server).invoke("hi")
    assert msg.response_metadata["model_name"] == "gpt-test"
    assert msg.usage_metadata is not None and msg.usage_metadata["total_tokens"] > 0


def test_tool_calls_are_parsed_with_args_and_stable_ids(serve: Any) -> None:
    script = by_turn([Reply.tool_calls([("add", {"a": 2, "b": 3}), ("add", {"a": 1, "b": 1})])])
    server = serve(script)
    llm = chat(server).bind_tools([add])
    msg = llm.invoke("what is 2+3?")
    assert [(c["name"], c["args"]) for c in msg.tool_calls] == [
        ("add", {"a": 2, "b": 3}),
        ("add", {"a": 1, "b": 1}),
    ]
    ids = [c["id"] for c in msg.tool_calls]
    assert all(i and i.startswith("call_") for i in ids) and len(set(ids)) == 2
    assert msg.response_metadata["finish_reason"] == "tool_calls"
    assert [c["id"] for c in llm.invoke("what is 2+3?").tool_calls] == ids
    assert server.requests[0].body["tools"][0]["function"]["name"] == "add"


def test_by_turn_answers_by_assistant_message_count(serve: Any) -> None:
    server = serve(by_turn([Reply.tool_calls([("add", {"a": 2, "b": 3})]), Reply.text("5")]))
    llm = chat(server).bind_tools([add])
    first = llm.invoke([HumanMessage("2+3?")])
    assert first.tool_calls and server.requests[-1].turn == 0
    history = [
        HumanMessage("2+3?"),
        first,
        ToolMessage("5", tool_call_id=first.tool_calls[0]["id"]),
    ]
    second = llm.invoke(history)
    assert second.content == "5" and not second.tool_calls
    assert server.requests[-1].turn == 1
    # A turn beyond the script is a visible 500, not a hang or a made-up answer.
    with pytest.raises(openai.InternalServerError, match="no scripted reply for turn 2"):
        llm.invoke([*history, second, HumanMessage("and 3+4?")])


def test_by_conversation_picks_by_first_message(serve: Any) -> None:
    server = serve(
        by_conversation(
            {"summarize": [Reply.text("a summary")], "translate": [Reply.text("une traduction")]}
        )
    )
    llm = chat(server)
    assert llm.invoke("please translate this").content == "une traduction"
    assert llm.invoke("summarize the report").content == "a summary"
    assert llm.invoke([SystemMessage("you translate"), HumanMessage("hi")]).content == (
        "une traduction"
    )
    with pytest.raises(openai.InternalServerError, match="no conversation matches"):
        llm.invoke("unrelated")


def test_streaming_text_and_usage(serve: Any) -> None:
    server = serve(lambda r: Reply.text("one two three four", usage=(9, 4)))
    llm = chat(server)
    chunks = list(llm.stream("hi"))
    assert len([c for c in chunks if c.content]) == 4  # several content deltas, not one
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    assert isinstance(total, AIMessageChunk)
    assert total.content == "one two three four"
    assert total.response_metadata["finish_reason"] == "stop"
    assert total.usage_metadata is None  # not asked for: no usage chunk
    assert "stream_options" not in server.requests[-1].body

    with_usage = list(llm.stream("hi", stream_usage=True))
    total = with_usage[0]
    for c in with_usage[1:]:
        total = total + c
    assert total.usage_metadata is not None
    assert (total.usage_metadata["input_tokens"], total.usage_metadata["output_tokens"]) == (9, 4)
    assert server.requests[-1].body["stream_options"] == {"include_usage": True}


def test_streaming_tool_calls(serve: Any) -> None:
    server = serve(lambda r: Reply.tool_calls([("add", {"a": 40, "b": 2})]))
    chunks = list(chat(server).bind_tools([add]).stream("40+2?"))
    total = chunks[0]
    for c in chunks[1:]:
        total = total + c
    assert isinstance(total, AIMessageChunk)
    assert [(c["name"], c["args"]) for c in total.tool_calls] == [("add", {"a": 40, "b": 2})]
    # Same ids as the non-streamed answer to the same request.
    assert (
        total.tool_calls[0]["id"]
        == chat(server).bind_tools([add]).invoke("40+2?").tool_calls[0]["id"]
    )
    assert total.response_metadata["finish_reason"] == "tool_calls"


def test_rate_limit_surfaces_with_retry_after(serve: Any) -> None:
    server = serve([Reply.error(429, "slow down", headers={"Retry-After": "2"})])
    with pytest.raises(openai.RateLimitError, match="slow down") as info:
        chat(server).invoke("hi")
    assert info.value.response.headers["retry-after"] == "2"
    assert info.value.status_code == 429
    assert info.value.code == "rate_limit_exceeded"


def test_bad_request_surfaces_with_message(serve: Any) -> None:
    server = serve([Reply.error(400, "context too long", code="context_length_exceeded")])
    with pytest.raises(openai.BadRequestError, match="context too long") as info:
        chat(server).invoke("hi")
    assert info.value.code == "context_length_exceeded"
    assert isinstance(info.value.body, dict) and info.value.body["message"] == "context too long"


def test_list_for_one_request_answers_repeats_in_order(serve: Any) -> None:
    server = serve(lambda r: [Reply.error(429, "busy"), Reply.text("ok")])
    llm = chat(server)
    with pytest.raises(openai.RateLimitError):
        llm.invoke("hi")
    assert llm.invoke("hi").content == "ok"
    assert llm.invoke("hi").content == "ok"  # exhausted: the last reply again
    # A different request starts its own count.
    with pytest.raises(openai.RateLimitError):
        llm.invoke("another")
    assert [r.seen for r in server.requests] == [0, 1, 2, 0]
    assert sorted(server.distinct().values()) == [1, 3]


def test_list_script_is_consumed_in_order_then_fails_loudly(serve: Any) -> None:
    server = serve([Reply.text("first"), Reply.text("second")])
    llm = chat(server)
    assert [llm.invoke("hi").content for _ in range(2)] == ["first", "second"]
    with pytest.raises(openai.InternalServerError, match="script exhausted"):
        llm.invoke("hi")


def test_script_exception_is_a_500_with_the_traceback(serve: Any) -> None:
    def script(request: Request) -> Reply:
        raise ValueError("boom in the script")

    server = serve(script)
    with pytest.raises(openai.InternalServerError, match="boom in the script") as info:
        chat(server).invoke("hi")
    assert "Traceback" in str(info.value)
    assert len(server.script_errors) == 1


def test_request_log_keeps_the_key_apart_and_writes_json_lines(serve: Any, tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    server = serve(lambda r: Reply.text("x"), log_path=log)
    chat(server).invoke("first")
    chat(server).invoke("second")
    assert server.request_count() == 2
    assert server.request_count(lambda r: r.first_text() == "second") == 1
    for request in server.requests:
        assert request.api_key_seen == KEY
        assert request.headers["authorization"] == "Bearer ***"
        assert KEY not in json.dumps(request.headers)
        assert request.path == "/v1/chat/completions"
        assert request.body["model"] == "gpt-test"
    assert read_log(log) == server.requests
    assert len(log.read_text().splitlines()) == 2


def test_no_key_is_recorded_as_none(serve: Any) -> None:
    server = serve(lambda r: Reply.text("x"))
    response = httpx.post(
        server.base_url + "/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "x"
    assert server.requests[0].api_key_seen is None
    assert "authorization" not in server.requests[0].headers


def test_unknown_path_bad_body_and_models(serve: Any) -> None:
    server = serve([Reply.text("x", model="gpt-test-2024-08-06")], models=["gpt-test"])
    missing = httpx.post(server.base_url + "/embeddings", json={})
    assert missing.status_code == 404 and "unknown path" in missing.json()["error"]["message"]
    bad = httpx.post(server.base_url + "/chat/completions", content=b"{not json")
    assert bad.status_code == 400 and "error" in bad.json()
    models = httpx.get(server.base_url + "/models").json()
    assert [m["id"] for m in models["data"]] == ["gpt-test", "gpt-test-2024-08-06"]
    assert server.request_count() == 0  # only chat completions are logged


def test_slow_reply_times_out_the_client(serve: Any) -> None:
    server = serve(lambda r: Reply.slow(Reply.text("late"), 30))
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        chat(server, timeout=0.3).invoke("hi")
    assert time.monotonic() - started < 5


def test_stop_drops_a_pending_slow_reply_at_once(serve: Any) -> None:
    server = serve(lambda r: Reply.slow(Reply.text("late"), 30))
    errors: list[BaseException] = []

    def call() -> None:
        try:
            chat(server, timeout=10).invoke("hi")
        except BaseException as exc:
            errors.append(exc)

    caller = threading.Thread(target=call)
    started = time.monotonic()
    caller.start()
    while server.request_count() == 0 and time.monotonic() - started < 5:
        time.sleep(0.01)
    server.stop()
    caller.join(timeout=20)
    # The waiting handler is woken and closes the connection: no wait for the delay or timeout.
    assert time.monotonic() - started < 5
    assert len(errors) == 1 and isinstance(errors[0], openai.APIConnectionError)
    assert not isinstance(errors[0], openai.APITimeoutError)


def test_slow_reply_arrives_after_the_delay(serve: Any) -> None:
    server = serve(lambda r: Reply.slow(Reply.text("late"), 0.3))
    started = time.monotonic()
    assert chat(server).invoke("hi").content == "late"
    assert time.monotonic() - started >= 0.3


def test_hangup_is_a_connection_error(serve: Any) -> None:
    server = serve([Reply.hangup(), Reply.text("back")])
    llm = chat(server)
    with pytest.raises(openai.APIConnectionError):
        llm.invoke("hi")
    assert llm.invoke("hi").content == "back"


def test_concurrent_requests_each_get_one_reply(serve: Any) -> None:
    n = 16
    server = serve([Reply.text(f"r{i}") for i in range(n)])
    llm = chat(server)
    answers: list[str] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        content = llm.invoke(f"q{i}").content
        with lock:
            answers.append(str(content))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(answers) == sorted(f"r{i}" for i in range(n))
    assert server.request_count() == n and len(server.distinct()) == n
