"""The conversation of the agent step a thread is in, read from the agent's own checkpoints
(a graph step's graph, when it holds LangChain ``messages``, is read the same way).

An agent step's messages are checkpointed by LangGraph as the step node's subgraph, under
the namespace ``"<node>:<task id>"`` of the same thread (see ``longtask.steps._agent``).
The task's own state never holds them: a message list grows every turn and would be stored
in full at every checkpoint of the task. So the conversation is read when asked for, from
the one agent subgraph checkpoint that is current; it costs one read per pending agent task
and nothing at all in storage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage
    from langgraph.pregel import Pregel
    from langgraph.types import StateSnapshot


def agent_messages(graph: Pregel[Any, Any], snapshot: StateSnapshot) -> list[BaseMessage] | None:
    """The messages of the agent step that is running or paused at ``snapshot`` (the
    current state of a thread of ``graph``), or None when no agent step is.

    When several agent steps are pending at once, the one paused at an interrupt wins (a
    tool approval: the conversation shows the call a person is asked about), then the first
    in the graph's order."""
    found = agent_conversation(graph, snapshot)
    return None if found is None else found[1]


def agent_conversation(
    graph: Pregel[Any, Any], snapshot: StateSnapshot
) -> tuple[str, list[BaseMessage]] | None:
    """``agent_messages`` with the checkpoint namespace of the agent (``"<node>:<task
    id>"``), which ``read_agent_messages`` reads again later."""
    conf = (snapshot.config or {}).get("configurable", {})
    thread_id = conf.get("thread_id")
    if thread_id is None:
        return None
    parent_ns = conf.get("checkpoint_ns", "")
    tasks = sorted(snapshot.tasks, key=lambda t: not t.interrupts)
    for task in tasks:
        node = graph.nodes.get(task.name)
        # an agent step's graph, or a graph step's (the user's own: messages if it has any)
        if node is None or (node.metadata or {}).get("longtask_kind") not in ("agent", "graph"):
            continue
        ns = f"{task.name}:{task.id}"
        if parent_ns:
            ns = f"{parent_ns}|{ns}"
        messages = read_agent_messages(graph, thread_id, ns)
        if messages:
            return ns, messages
    return None


def read_agent_messages(graph: Pregel[Any, Any], thread_id: str, ns: str) -> list[BaseMessage]:
    """The messages of the agent checkpointed under namespace ``ns`` of the thread, as of
    its latest checkpoint (also once the step is done); [] if it has none yet."""
    saver = graph.checkpointer
    if saver is None or isinstance(saver, bool):
        return []
    found = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}})
    if found is None:
        return []  # the agent has not written its first checkpoint yet
    return list(found.checkpoint.get("channel_values", {}).get("messages") or [])
