"""The offline model of the demo: a LangChain chat model that answers from a script.

With no ``OPENAI_API_KEY`` the demo's agents talk to this model instead of a real one. It
answers each agent (named in its system prompt as ``(agent: NAME)``) turn by turn with the
tool calls that perform the migration's real edits, so the demo runs offline and the same
every time. Every request is appended to a JSON Lines log (one line per model call, with a
hash of the conversation): a resumed run that repeated a model call would show it there.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult

MODEL_NAME = "longtask-offline-demo"
_AGENT = re.compile(r"\(agent: ([a-z_]+)\)")

#: a scripted reply: text, or tool calls [(tool, args), ...]
Reply = str | list[tuple[str, dict[str, Any]]]


class ScriptedChatModel(BaseChatModel):
    """Answers from ``script[agent][turn]``; logs every call to ``log_path``."""

    script: dict[str, list[Reply]]
    log_path: str | None = None
    #: what the events name as the model requested (a ChatOpenAI has the same attribute)
    model_name: str = MODEL_NAME

    @property
    def _llm_type(self) -> str:
        return "longtask-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self  # the script names the tools itself

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        system = next((m for m in messages if isinstance(m, SystemMessage)), None)
        found = _AGENT.search(str(system.content) if system else "")
        if found is None:
            raise ValueError("the offline demo model answers only the demo's agents")
        agent = found.group(1)
        turn = sum(1 for m in messages if isinstance(m, AIMessage))
        replies = self.script.get(agent, [])
        reply = replies[min(turn, len(replies) - 1)] if replies else "done"
        conversation = json.dumps([m.model_dump(mode="json") for m in messages], default=str)
        digest = hashlib.sha256(conversation.encode()).hexdigest()[:16]
        if self.log_path:
            with open(self.log_path, "a", encoding="utf-8") as log:
                log.write(
                    json.dumps({"agent": agent, "turn": turn, "request": digest, "ts": time.time()})
                    + "\n"
                )
        tokens_in = max(1, len(conversation) // 4)
        if isinstance(reply, str):
            message = AIMessage(content=reply)
            finish = "stop"
        else:
            calls = [
                {"name": name, "args": args, "id": f"call_{digest[:8]}_{i}", "type": "tool_call"}
                for i, (name, args) in enumerate(reply)
            ]
            message = AIMessage(content="", tool_calls=calls)
            finish = "tool_calls"
        tokens_out = max(1, len(json.dumps(reply)) // 4)
        message.usage_metadata = {
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "total_tokens": tokens_in + tokens_out,
        }
        message.response_metadata = {
            "model_name": self.model_name,
            "finish_reason": finish,
            "id": f"offline-{digest}",
        }
        return ChatResult(generations=[ChatGeneration(message=message)])


def model_log(path: str | Path) -> list[dict[str, Any]]:
    """The calls the offline model answered, in order."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


ModelFactory = Callable[[], Any]
