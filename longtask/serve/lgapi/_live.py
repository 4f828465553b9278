"""A run's stream made from the run itself: the process that advances the thread (serve's
executor, or a worker) stores the parts LangGraph yields (``longtask.runtime._parts``: every
mode, the task graph and its subgraphs), in order, and each client of the run's stream turns
them into the LangGraph Server API's SSE events for the modes it asked for.

- ``values``: the state after each super-step (results by step name, ``messages``: the
  conversation, see ``chat``), with ``__interrupt__`` when the run pauses; again when
  a running agent's conversation grows.
- ``updates``: ``{step: {step: result}}`` as each step finishes (LangGraph's ``{node:
  update}``), ``{"__interrupt__": [...]}`` at a pause.
- ``messages-tuple`` / ``messages``: a model's answer token by token as the model streams
  it (``messages-tuple``: each chunk; ``messages``: ``messages/metadata`` then
  ``messages/partial`` with the message so far), a tool's message whole as its call
  completes (``messages/complete``), with the step (or the served graph's node) as
  ``langgraph_node``.
- ``custom``: longtask's events as a step sends them (the stored event's fields; no id).
- ``events``: ``on_chain_start``/``on_chain_end`` per step, ``on_chat_model_end`` per
  model message, ``on_custom_event`` per longtask event.
- ``tasks``, ``checkpoints``, ``debug`` (both, wrapped): LangGraph's own parts, values
  shown as above. With ``stream_subgraphs`` a subgraph's parts come as ``mode|namespace``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from longtask.model import GraphApp, GraphStep
from longtask.serve.lgapi._chat import KEY, Conversation, messages_json
from longtask.serve.lgapi._json import plain, sse
from longtask.serve.lgapi._plain import plain_values
from longtask.serve.lgapi._state import api_values, decode_values, interrupt_json, step_name
from longtask.steps import INTERRUPT_KIND

if TYPE_CHECKING:
    from longtask._runner import Runner
    from longtask.model import LongTask

_INTERRUPT = "__interrupt__"


def _interrupts(raw: Any) -> list[dict[str, Any]]:
    return [interrupt_json(i, schema=True) for i in raw or ()]


def _graph_interrupts(raw: Any) -> list[dict[str, Any]]:
    """A graph step's pauses as the graph's own interrupts: the graph's value (a stop
    before or after a node is no interrupt of LangGraph's, and none here)."""
    out = []
    for intr in _interrupts(raw):
        value = intr["value"]
        if isinstance(value, dict) and value.get("kind") == INTERRUPT_KIND:
            if value.get("stop"):
                continue
            intr = {**intr, "value": value.get("value")}
        out.append(intr)
    return out


def _where(config: Any) -> dict[str, Any] | None:
    if not isinstance(config, dict):
        return None
    conf = config.get("configurable") or {}
    out = {k: conf.get(k) for k in ("thread_id", "checkpoint_ns", "checkpoint_id")}
    if conf.get("checkpoint_map"):
        out["checkpoint_map"] = conf["checkpoint_map"]
    return out


class LiveParts:
    """Turns one run's tapped parts into SSE events for one client."""

    def __init__(
        self,
        runner: Runner,
        task: LongTask,
        run_id: str,
        thread_id: str,
        modes: set[str],
        subgraphs: bool,
        seen_ids: list[str],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.runner = runner
        self.task = task
        self.run_id = run_id
        self.thread_id = thread_id
        self.modes = modes
        self.subgraphs = subgraphs
        self.chat = Conversation(runner, task, thread_id)
        #: graph steps among the conversing steps: an update says their messages only when
        #: their graph had some (an agent step's always names its conversation)
        self._graph_steps = {n for n in self.chat.agents if isinstance(task.steps[n], GraphStep)}
        #: what each message's metadata carries besides its node (as LangGraph's server:
        #: the thread's metadata, the graph and the assistant)
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.sent: set[str] = set(seen_ids)
        #: the task graph's channels as of its last values part
        self.channels: dict[str, Any] | None = None
        #: agent step -> its conversation so far (running or paused)
        self.live: dict[str, list[dict[str, Any]]] = {}
        self._last_values: Any = None
        self._updated: dict[str, Any] = {}
        #: the task graph's step (super-step) now, and each node's triggers
        self._step: int = 0
        self._triggers: dict[str, list[str]] = {}
        self._steps: dict[tuple[str, ...], int] = {}
        #: how many longtask events of each (kind, stage, step, attempt) were sent
        self._events_sent: dict[tuple[str, Any, Any, Any], int] = {}
        #: the graph step of a plain LangGraph graph served as is (its parts are the run's)
        self.plain = task.graph_step.name if isinstance(task, GraphApp) else None
        #: messages a node of it wrote without an id, to say once the state names them
        self._unnamed: list[tuple[str, dict[str, Any]]] = []
        #: a served graph's subgraphs' last values, by namespace
        self._inner_values: dict[tuple[str, ...], Any] = {}
        #: messages said token by token so far, by id (their whole is not said again)
        self._streamed: dict[str, Any] = {}
        self._handlers: dict[str, Callable[[tuple[str, ...], Any], list[bytes]]] = {
            "values": self._values,
            "updates": self._updates,
            "custom": self._custom,
            "tasks": self._tasks,
            "checkpoints": self._checkpoints,
        }

    def convert(self, ns: tuple[str, ...], mode: str, chunk: Any) -> list[bytes]:
        if mode == "messages":
            return self._tokens(ns, chunk)
        if self.plain is not None:
            return self._plain(ns, mode, chunk)
        handler = self._handlers.get(mode)
        return handler(ns, chunk) if handler is not None else []

    # -- a plain LangGraph graph served as is ------------------------------------------------

    def _named(self, messages: Any) -> list[bytes]:
        """The messages a node wrote without an id (a tool's), said as the state holds them
        (with the id its reducer gave them), before the values that hold them."""
        out: list[bytes] = []
        if not self._unnamed or not isinstance(messages, list):
            return out

        def key(m: dict[str, Any]) -> tuple[Any, ...]:
            return (m.get("type"), str(m.get("content")), m.get("tool_call_id"))

        for node, message in self._unnamed:
            found = next(
                (
                    m
                    for m in messages
                    if isinstance(m, dict)
                    and m.get("id") not in self.sent
                    and key(m) == key(message)
                ),
                None,
            )
            if found is not None:
                out += self._said((node,), node, [found])
        self._unnamed = []
        return out

    def _plain(self, ns: tuple[str, ...], mode: str, chunk: Any) -> list[bytes]:
        """The parts of a ``GraphApp``'s run as the graph's own: its parts (in the graph
        step's namespace) lifted to the top, the wrapper's own left out but for a pause
        (its interrupts as the graph's) and longtask's events (``custom``)."""
        if mode == "custom":
            return self._plain_custom(ns, chunk)
        if not ns:
            if not isinstance(chunk, dict) or _INTERRUPT not in chunk:
                return []
            # The graph's own updates part says its interrupts; the values part at a pause
            # is the top graph's (LangGraph's server adds them to the last values).
            if mode != "values" or "values" not in self.modes:
                return []
            intrs = _graph_interrupts(chunk[_INTERRUPT])
            return [sse("values", {**(self._last_values or {}), _INTERRUPT: intrs})]
        # the step's node's namespace (``step:task``), or the graph's own one it keeps its
        # state in (``step``)
        if ns[0] != self.plain and not ns[0].startswith(f"{self.plain}:"):
            return []
        inner = ns[1:]
        if inner and not self.subgraphs:
            return []
        event = self._event(mode, inner)
        if mode == "values" and isinstance(chunk, dict):
            values = plain_values({k: v for k, v in chunk.items() if k != _INTERRUPT})
            out = []
            if not inner:
                out += self._named(values.get(KEY))
                if "values" not in self.modes or values == self._last_values:
                    return out
                self._last_values = values
            elif _INTERRUPT in chunk:
                # a subgraph's pause: its last values with its interrupts, as LangGraph's
                # server says the top graph's
                values = {
                    **self._inner_values.get(inner, {}),
                    _INTERRUPT: _graph_interrupts(chunk[_INTERRUPT]),
                }
            else:
                self._inner_values[inner] = values
            return [*out, sse(event, values)] if "values" in self.modes else out
        if mode == "updates" and isinstance(chunk, dict):
            out = []
            if not inner:
                said = [
                    (node, m)
                    for node, update in chunk.items()
                    if isinstance(update, dict)
                    for m in messages_json(update.get(KEY) or [])
                ]
                for node, message in said:
                    if message.get("id"):
                        out += self._said((node,), node, [message])
                    else:  # its id is the one the state's reducer gives it: said with it
                        self._unnamed.append((node, message))
            if "updates" in self.modes:
                updates = {
                    k: _graph_interrupts(v) if k == _INTERRUPT else plain_values(v)
                    for k, v in chunk.items()
                }
                out.append(sse(event, updates))
            return out
        if mode in ("tasks", "checkpoints") and isinstance(chunk, dict):
            payload = {
                k: _graph_interrupts(v)
                if k == "interrupts"
                else plain_values(v)
                if k in ("input", "result", "values")
                else v
                for k, v in chunk.items()
            }
            if mode == "checkpoints":
                payload["tasks"] = [
                    {**t, "interrupts": _graph_interrupts(t.get("interrupts")), "state": None}
                    for t in chunk.get("tasks") or ()
                    if isinstance(t, dict)
                ]
                payload.pop("config", None)
                payload.pop("parent_config", None)
            step = (chunk.get("metadata") or {}).get("step")
            if isinstance(step, int):
                self._steps[inner] = step
                self._step = step if not inner else self._step
            triggers = chunk.get("triggers")
            if mode == "tasks" and not inner and isinstance(triggers, list | tuple):
                # what a node's whole messages say triggered it
                self._triggers[str(chunk.get("name"))] = [str(t) for t in triggers]
            out = []
            if mode in self.modes:
                out.append(sse(event, plain(payload)))
            if "debug" in self.modes:
                kind = "checkpoint" if mode == "checkpoints" else "task"
                if mode == "tasks" and "result" in chunk:
                    kind = "task_result"
                at = self._steps.get(inner, 0) + (0 if mode == "checkpoints" else 1)
                out.append(sse(self._event("debug", inner), self._debug(kind, plain(payload), at)))
            return out
        return []

    def _plain_custom(self, ns: tuple[str, ...], chunk: Any) -> list[bytes]:
        """A served graph's own ``custom`` writes, in its own namespaces (a subgraph's only
        with ``stream_subgraphs``, as on LangGraph's server); longtask's events as they
        are for a task."""
        if isinstance(chunk, dict) and "longtask" in chunk:
            return self._custom((), chunk)
        if not ns or (ns[0] != self.plain and not ns[0].startswith(f"{self.plain}:")):
            return []
        inner = ns[1:]
        if "custom" not in self.modes or (inner and not self.subgraphs):
            return []
        return [sse(self._event("custom", inner), plain(chunk))]

    # -- helpers ---------------------------------------------------------------------------

    def _event(self, mode: str, ns: tuple[str, ...]) -> str:
        return f"{mode}|{'|'.join(ns)}" if ns else mode

    def _agent_of(self, ns: tuple[str, ...]) -> str | None:
        """The agent step whose own graph namespace ``ns`` is (None for any other)."""
        if len(ns) != 1:
            return None
        node = ns[0].split(":", 1)[0]
        step = node.split(".", 1)[0]
        return step if step in self.chat.agents else None

    def _live_messages(self) -> list[dict[str, Any]]:
        return [m for step in self.chat.agents for m in self.live.get(step, [])]

    def _state_values(self, channels: dict[str, Any]) -> dict[str, Any]:
        return api_values(self.runner, channels, self.chat, self._live_messages())

    def _emit_values(self, values: dict[str, Any]) -> list[bytes]:
        if "values" not in self.modes or values == self._last_values:
            return []
        self._last_values = values
        return [sse("values", values)]

    # -- modes -----------------------------------------------------------------------------

    def _values(self, ns: tuple[str, ...], chunk: Any) -> list[bytes]:
        if not isinstance(chunk, dict):
            return []
        if not ns:
            self.channels = {k: v for k, v in chunk.items() if k != _INTERRUPT}
            for step in list(self.live):
                if f"out.{step}" in self.channels:
                    # Finished: its conversation is its transcript now (the same messages).
                    self.chat.finished(step, self.live.pop(step))
            values = self._state_values(self.channels)
            if _INTERRUPT in chunk:
                values[_INTERRUPT] = _interrupts(chunk[_INTERRUPT])
                self._last_values = None  # a pause is always said
            return self._emit_values(values)
        out: list[bytes] = []
        agent = self._agent_of(ns)
        if agent is not None:
            messages = messages_json(chunk.get("messages") or [])
            self.live[agent] = messages
            out += self._said(ns, agent, messages)
        if self.subgraphs:
            out.append(sse(self._event("values", ns), self._sub(chunk)))
        return out

    def _sub(self, chunk: Any) -> Any:
        """A subgraph's part (an agent's state) as JSON, its messages as the API's dicts."""
        if isinstance(chunk, dict):
            return {
                k: messages_json(v) if k == "messages" and isinstance(v, list) else plain(v)
                for k, v in chunk.items()
            }
        return plain(chunk)

    def _tokens(self, ns: tuple[str, ...], chunk: Any) -> list[bytes]:
        """A model's token (a message chunk), as LangGraph's server says one: in
        ``messages-tuple`` the chunk, in ``messages`` the message so far (``partial``).
        A model in a subgraph streams only with ``stream_subgraphs``, as there."""
        if not self.modes & {"messages", "messages-tuple"} or not isinstance(chunk, tuple | list):
            return []
        message, meta = chunk[0], dict(chunk[1] or {})
        inner = ns
        if self.plain is not None:
            if not ns or (ns[0] != self.plain and not ns[0].startswith(f"{self.plain}:")):
                return []
            inner = ns[1:]
            node = str(meta.get("langgraph_node") or self.plain)
            where = str(meta.get("langgraph_checkpoint_ns") or "").split("|")[1:]
        else:
            # A step's model (an agent's, a graph step's) speaks as the step, at the top.
            top = ns[0] if ns else str(meta.get("langgraph_node"))
            node = top.split(":", 1)[0].split(".", 1)[0]
            inner = ns[1:]
            where = list(ns)
        if inner and not self.subgraphs:
            return []
        # with subgraphs, named by the graph they come from, as the step's whole messages
        named = inner if self.plain is not None else ns
        mid = str(message.id)
        first = mid not in self._streamed
        self._streamed[mid] = message if first else self._streamed[mid] + message
        said = {
            **self.metadata,
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            **plain({k: v for k, v in meta.items() if k.startswith("ls_") or k == "tags"}),
            "langgraph_step": meta.get("langgraph_step", self._step),
            "langgraph_node": node,
            "langgraph_triggers": plain(list(meta.get("langgraph_triggers") or ())),
            "langgraph_path": plain(list(meta.get("langgraph_path") or ())),
            "langgraph_checkpoint_ns": "|".join(where),
            "checkpoint_ns": "|".join(where),
        }
        out = []
        if "messages-tuple" in self.modes:
            name = self._event("messages", named) if self.subgraphs else "messages"
            out.append(sse(name, [messages_json([message])[0], said]))
        if "messages" in self.modes:
            from langchain_core.messages import message_chunk_to_message

            if first:
                out.append(sse("messages/metadata", {mid: {"metadata": said}}))
            whole = message_chunk_to_message(self._streamed[mid])
            out.append(sse("messages/partial", messages_json([whole])))
        return out

    def _said(self, ns: tuple[str, ...], step: str, messages: list[dict[str, Any]]) -> list[bytes]:
        out: list[bytes] = []
        for message in messages:
            mid = message.get("id")
            if not mid or mid in self.sent:
                continue
            self.sent.add(mid)
            if message.get("type") in ("human", "system"):
                continue  # the prompt: the run's input, which LangGraph does not stream
            # said token by token, as LangGraph's server says it: not again
            streamed = mid in self._streamed
            meta = {
                **self.metadata,
                "run_id": self.run_id,
                "thread_id": self.thread_id,
                "langgraph_step": self._step,
                "langgraph_node": step,
                "langgraph_triggers": self._triggers.get(ns[0].split(":", 1)[0], []),
                "langgraph_path": ["__pregel_pull", step],
                "langgraph_checkpoint_ns": "|".join(ns),
            }
            if "messages-tuple" in self.modes and not streamed:
                # With subgraphs, a subgraph's messages name it, as LangGraph's server does.
                name = self._event("messages", ns) if self.subgraphs else "messages"
                out.append(sse(name, [message, meta]))
            if "messages" in self.modes and not streamed:
                out.append(sse("messages/metadata", {mid: {"metadata": meta}}))
                out.append(sse("messages/complete", [message]))
            if "events" in self.modes and message.get("type") == "ai":
                out.append(
                    sse(
                        "events",
                        self._lc_event("on_chat_model_end", step, mid, {"output": message}),
                    )
                )
        return out

    def start(self) -> list[bytes]:
        """What a run's stream says before its first part: the run's chain starts."""
        if "events" not in self.modes:
            return []
        return [sse("events", self._lc_event("on_chain_start", None, None, {"input": {}}))]

    def _updates(self, ns: tuple[str, ...], chunk: Any) -> list[bytes]:
        if not isinstance(chunk, dict):
            return []
        if ns:
            out: list[bytes] = []
            agent = self._agent_of(ns)
            if agent is not None:
                # A model's or a tool's message as its node ends, before the agent's state.
                said = [
                    m
                    for update in chunk.values()
                    if isinstance(update, dict)
                    for m in messages_json(update.get(KEY) or [])
                ]
                out += self._said(ns, agent, said)
            if self.subgraphs and "updates" in self.modes:
                parts = {k: self._sub(v) for k, v in chunk.items()}
                out.append(sse(self._event("updates", ns), parts))
            return out
        if "updates" not in self.modes:
            return []
        out = []
        for node, update in chunk.items():
            if node == _INTERRUPT:
                out.append(sse("updates", {_INTERRUPT: _interrupts(update)}))
            elif isinstance(update, dict):
                for step, value in decode_values(self.runner, update).items():
                    # A pause's nodes both write its result: said once.
                    if self._updated.get(step, _INTERRUPT) != value:
                        self._updated[step] = value
                        # LangGraph's shape, {node: {key: value}}: the step's node wrote
                        # the state key named after it (an agent's, its conversation too).
                        said_update: dict[str, Any] = {step: value}
                        if step in self.chat.agents:
                            talk = self.live.get(step) or self.chat.said_by(step)
                            if talk or step not in self._graph_steps:
                                said_update[KEY] = self.chat._said(talk or [], chat=False)
                        out.append(sse("updates", {step: said_update}))
        return out

    def _custom(self, ns: tuple[str, ...], chunk: Any) -> list[bytes]:
        if isinstance(chunk, dict) and "longtask" in chunk:
            data: Any = {
                "id": None,
                "thread_id": chunk.get("thread_id", self.thread_id),
                "kind": chunk["longtask"],
                "stage": chunk.get("stage"),
                "step": chunk.get("step"),
                "attempt": chunk.get("attempt"),
                "data": plain(chunk.get("data") or {}),
                "ts": datetime.now(UTC).isoformat(),
            }
            name = str(chunk["longtask"])
            key = (name, data["stage"], data["step"], data["attempt"])
            self._events_sent[key] = self._events_sent.get(key, 0) + 1
        else:
            data, name = plain(chunk), "custom"
        return self._custom_parts(ns, data, name)

    def stored(self, events: list[Any]) -> list[bytes]:
        """The run's stored events its steps did not send (the Runner's own: the task's
        start and end, stages, recoveries), once the run is over: none is left out."""
        out: list[bytes] = []
        for event in events:
            key = (event.kind, event.stage, event.step, event.attempt)
            if self._events_sent.get(key, 0) > 0:
                self._events_sent[key] -= 1  # sent while the step ran
                continue
            out += self._custom_parts((), event.to_json(), event.kind)
        return out

    def _custom_parts(self, ns: tuple[str, ...], data: Any, name: str) -> list[bytes]:
        out = []
        # A served graph's custom stream is the graph's own: longtask's events are not in
        # it (the thread's events and the events mode have them).
        theirs = self.plain is None or name == "custom"
        if "custom" in self.modes and (not ns or self.subgraphs) and theirs:
            out.append(sse(self._event("custom", ns if self.subgraphs else ()), data))
        if "events" in self.modes:
            step = data.get("step") if isinstance(data, dict) else None
            event = self._lc_event("on_custom_event", step, None, data)
            event["name"] = name
            out.append(sse("events", event))
        return out

    def _tasks(self, ns: tuple[str, ...], chunk: Any) -> list[bytes]:
        if ns and not self.subgraphs:
            return []
        if not isinstance(chunk, dict):
            return []
        payload = plain(self._task_payload(chunk, not ns))
        started = "result" not in chunk
        if started and not ns and isinstance(chunk.get("triggers"), list | tuple):
            self._triggers[str(chunk.get("name"))] = [str(t) for t in chunk["triggers"]]
        out = []
        if "tasks" in self.modes:
            out.append(sse(self._event("tasks", ns), payload))
        if "debug" in self.modes:
            kind = "task" if started else "task_result"
            step = self._steps.get(ns, -1) + 1
            out.append(sse(self._event("debug", ns), self._debug(kind, payload, step)))
        if "events" in self.modes and not ns:
            name = str(chunk.get("name"))
            if started:
                event = self._lc_event("on_chain_start", name, chunk.get("id"), {"input": {}})
            else:
                event = self._lc_event(
                    "on_chain_end", name, chunk.get("id"), {"output": payload.get("result")}
                )
            event["name"] = name
            out.append(sse("events", event))
        return out

    def _task_payload(self, chunk: dict[str, Any], ns_root: bool) -> dict[str, Any]:
        out = dict(chunk)
        if "input" in out:
            # the state the task starts from, as the API shows state
            if ns_root and self.channels is not None:
                out["input"] = self._state_values(self.channels)
            else:
                out["input"] = self._sub(out["input"]) if not ns_root else None
        if isinstance(out.get("result"), dict):
            result = out["result"]
            out["result"] = decode_values(self.runner, result) if ns_root else self._sub(result)
        if "interrupts" in out:
            out["interrupts"] = _interrupts(out["interrupts"])
        return out

    def _checkpoints(self, ns: tuple[str, ...], chunk: Any) -> list[bytes]:
        if (ns and not self.subgraphs) or not isinstance(chunk, dict):
            return []
        payload = dict(chunk)
        if not ns and isinstance(chunk.get("values"), dict):
            payload["values"] = self._state_values(chunk["values"])
        elif isinstance(chunk.get("values"), dict):
            payload["values"] = self._sub(chunk["values"])
        if isinstance(payload.get("next"), list | tuple) and not ns:
            payload["next"] = list(dict.fromkeys(step_name(str(n)) for n in payload["next"]))
        tasks = []
        for t in chunk.get("tasks") or ():
            item = dict(t) if isinstance(t, dict) else {"value": t}
            if "interrupts" in item:
                item["interrupts"] = _interrupts(item["interrupts"])
            item["state"] = None  # a subgraph's state: its own checkpoints parts say it
            tasks.append(item)
        payload["tasks"] = tasks
        step = (chunk.get("metadata") or {}).get("step")
        if isinstance(step, int):
            self._steps[ns] = step
            if not ns:
                self._step = step
        payload = plain(payload)
        out = []
        if "checkpoints" in self.modes:
            out.append(sse(self._event("checkpoints", ns), payload))
        if "debug" in self.modes:
            # The checkpoint and its parent as the API names them (beside LangGraph's
            # configs), which the debug parts of LangGraph's server carry.
            wrapped = {
                **payload,
                "checkpoint": _where(chunk.get("config")),
                "parent_checkpoint": _where(chunk.get("parent_config")),
            }
            out.append(
                sse(self._event("debug", ns), self._debug("checkpoint", plain(wrapped), step))
            )
        return out

    def _debug(self, kind: str, payload: Any, step: Any) -> dict[str, Any]:
        return {
            "type": kind,
            "timestamp": datetime.now(UTC).isoformat(),
            "step": step,
            "payload": payload,
        }

    def _lc_event(self, kind: str, node: str | None, run: Any, data: Any) -> dict[str, Any]:
        return {
            "event": kind,
            "name": node or self.task.name,
            "run_id": str(run) if run else self.run_id,
            "data": data,
            "tags": [],
            "metadata": {"thread_id": self.thread_id, "langgraph_node": node},
            "parent_ids": [self.run_id],
        }
