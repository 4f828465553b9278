"""The task of ``test_graph_hitl.py``, loaded by file reference (the CLI and the Server API
load it too): one graph step, a LangChain agent whose ``deploy`` tool is reviewed by
LangChain's ``HumanInTheLoopMiddleware``, unchanged. ``$LT_HITL_MODE`` picks the
middleware's mode (batched or per_call), ``$LT_HITL_ALLOWED`` its allowed decisions
(comma-separated); the tool appends each environment it deploys to to
``$LT_HITL_DEPLOYED``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from langchain_core.tools import tool

from longtask import LongTask, Stage, graph_step


@tool
def deploy(env: str) -> str:
    """Deploy the service to an environment."""
    with Path(os.environ["LT_HITL_DEPLOYED"]).open("a") as f:
        f.write(env + "\n")
    return f"deployed to {env}"


def agent() -> Any:
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langchain_openai import ChatOpenAI

    allowed = os.environ.get("LT_HITL_ALLOWED", "approve,edit,reject,respond").split(",")
    review = HumanInTheLoopMiddleware(
        interrupt_on={"deploy": {"allowed_decisions": allowed}},  # type: ignore[typeddict-item]
        interrupt_mode=os.environ.get("LT_HITL_MODE", "batched"),  # type: ignore[arg-type]
    )
    model = ChatOpenAI(model="gpt-4o-mini", max_retries=0)
    return create_agent(model, [deploy], middleware=[review])


task = LongTask(
    "hitl",
    stages=[
        Stage(
            "release",
            [
                graph_step(
                    "release",
                    agent,
                    input=lambda ctx: {"messages": [{"role": "user", "content": "Ship it."}]},
                )
            ],
        )
    ],
)
