"""The chat graph of the differential test (``test_lg_differential.py``), as a plain
LangGraph graph served by LangGraph's own server (``langgraph-api``, in memory): the same
shape as ``lgdiff_task.py``'s LongTask. ``answer`` runs a LangChain agent (``create_agent``
over ChatOpenAI, one tool) as a subgraph from the node, as longtask's agent step does;
``approve`` asks a person with ``interrupt()``; ``finish`` ends. Each node writes its result
to a channel of its own name, as a longtask step does.

Loaded by file reference by the reference server's process; imports nothing of longtask.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Annotated, Any

from langchain.agents import create_agent
from langchain_core.messages import AnyMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    answer: str
    approve: dict[str, Any]
    finish: str


def lookup(topic: str) -> str:
    """Look a topic up (changes nothing)."""
    return f"facts about {topic}"


agent = create_agent(ChatOpenAI(model="gpt-test"), tools=[lookup])


def answer(state: State) -> dict[str, Any]:
    result = agent.invoke({"messages": state["messages"]})
    return {"messages": result["messages"], "answer": result["messages"][-1].content}


def approve(state: State) -> dict[str, Any]:
    # The request and the decision have the keys longtask's approval gives them (what is
    # compared is the protocol, not longtask's approval payload).
    plan = {"answer": state["answer"]}
    digest = hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()[:16]
    decision = interrupt(
        {
            "kind": "approval",
            "step": "approve",
            "plan": plan,
            "plan_hash": digest,
            "approvers": None,
            "requested_at": _now(),
            "deadline": None,
            "valid_for": None,
            "action_requests": [
                {
                    "name": "approve",
                    "args": {"plan": plan, "plan_hash": digest},
                    "arguments": {"plan": plan, "plan_hash": digest},
                    "description": f"Approve the plan of step 'approve' (plan hash {digest})",
                }
            ],
            "review_configs": [
                {"action_name": "approve", "allowed_decisions": ["approve", "reject"]}
            ],
        }
    )
    return {
        "approve": {
            "approved": bool(decision["approved"]),
            "by": "alice",
            "plan_hash": digest,
            "comment": decision.get("comment"),
            "at": _now(),
        }
    }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def finish(state: State) -> dict[str, Any]:
    return {"finish": f"sent: {state['answer']}"}


builder = StateGraph(State)
builder.add_node("answer", answer)
builder.add_node("approve", approve)
builder.add_node("finish", finish)
builder.add_edge(START, "answer")
builder.add_edge("answer", "approve")
builder.add_edge("approve", "finish")
builder.add_edge("finish", END)
graph = builder.compile()
