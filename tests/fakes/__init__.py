"""Test doubles that need nothing installed: a scripted OpenAI-compatible server."""

from .openai_server import (
    Answer,
    FakeOpenAI,
    Reply,
    Request,
    Script,
    ScriptFn,
    by_conversation,
    by_turn,
    read_log,
)

__all__ = [
    "Answer",
    "FakeOpenAI",
    "Reply",
    "Request",
    "Script",
    "ScriptFn",
    "by_conversation",
    "by_turn",
    "read_log",
]
