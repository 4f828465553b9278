"""Shapes of LangGraph Server API answers, and the differences between two traces of the
differential test (``test_lg_differential.py``): LangGraph's own server (the reference)
and ``longtask serve``.

A shape keeps what a client depends on and drops what differs run to run: the keys of an
object and the types of its values (ids and timestamps are strings like any other), the
values of the keys that name a kind (``type``, ``event``, ``status``, ``next``...), and the
order of a list's element shapes with repeats collapsed (LangGraph streams a model's
answer token by token, longtask whole messages: ``[chunk, chunk, chunk]`` and ``[chunk]``
have one shape). Keys that are ids (a message id in ``messages/metadata``) become
``<id>``. A stream is compared per event name (namespaces' task ids dropped), and by the
order in which the kinds of part first arrive.

A difference is ``Difference(label, path, text)``; ``INTENDED`` lists the ones allowed,
each with its reason (docs/internals/server-differences.md lists it).
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: keys whose value is itself compared (a kind, not data)
LITERAL_KEYS = frozenset({"type", "event", "status", "next", "kind", "__error__"})
_ID = re.compile(
    r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}|"
    r"(lc_)?run-.*|call_[0-9a-zA-Z]+)$"
)
_NS_ID = re.compile(r":[0-9a-f-]{36}")


@dataclass(frozen=True)
class Difference:
    label: str  # the call of the script
    path: str  # where in its answer ("" for the whole answer)
    text: str  # what differs, reference first

    def __str__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"{self.label}{where}: {self.text}"


@dataclass(frozen=True)
class Intended:
    """An allowed difference: ``label`` is an fnmatch pattern, ``path`` and ``text`` are
    regular expressions that must match the whole path and text."""

    label: str
    path: str
    reason: str
    text: str = ".*"

    def allows(self, diff: Difference) -> bool:
        return (
            fnmatch.fnmatchcase(diff.label, self.label)
            and re.fullmatch(self.path, diff.path) is not None
            and re.fullmatch(self.text, diff.text, re.DOTALL) is not None
        )


def event_name(name: str) -> str:
    """A stream part's event without the task ids of its namespace
    (``updates|answer:1f0...`` -> ``updates|answer``)."""
    return _NS_ID.sub("", name)


def shape(value: Any) -> Any:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (list, tuple)):
        return collapse(shape(v) for v in value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key in sorted(value, key=str):
            name = "<id>" if _ID.match(str(key)) else str(key)
            if key in LITERAL_KEYS and isinstance(value[key], (str, int, list)):
                out[name] = value[key] if not isinstance(value[key], list) else list(value[key])
            elif name not in out:
                out[name] = shape(value[key])
        return out
    return type(value).__name__


def collapse(items: Iterable[Any]) -> list[Any]:
    """The items with runs of equal ones collapsed to one."""
    out: list[Any] = []
    for item in items:
        if not out or out[-1] != item:
            out.append(item)
    return out


def brief(s: Any, width: int = 160) -> str:
    text = repr(s)
    return text if len(text) <= width else text[: width - 3] + "..."


def diff_shapes(label: str, ref: Any, got: Any, path: str = "") -> list[Difference]:
    """Differences between two shapes (``shape()`` results)."""
    if isinstance(ref, dict) and isinstance(got, dict):
        out: list[Difference] = []
        for key in ref:
            sub = f"{path}.{key}"
            if key not in got:
                out.append(
                    Difference(label, sub, f"missing in longtask (reference: {brief(ref[key])})")
                )
            else:
                out += diff_shapes(label, ref[key], got[key], sub)
        for key in got:
            if key not in ref:
                out.append(
                    Difference(label, f"{path}.{key}", f"extra in longtask ({brief(got[key])})")
                )
        return out
    if isinstance(ref, list) and isinstance(got, list):
        if ref and got and all(isinstance(x, str) for x in ref + got) and ref != got:
            # a literal list (``next``) or a list of scalars' types
            return [Difference(label, path, f"reference {ref!r}, longtask {got!r}")]
        if len(ref) == len(got):
            out = []
            for i, (a, b) in enumerate(zip(ref, got, strict=True)):
                out += diff_shapes(label, a, b, f"{path}[{i}]")
            return out
        return _diff_aligned(label, ref, got, path)
    if ref != got:
        return [Difference(label, path, f"reference {brief(ref)}, longtask {brief(got)}")]
    return []


def signature(item: Any) -> str:
    """What aligns two lists of unequal length: an item's kinds (its literal keys), node
    names cut at the first dot (longtask's nodes of one step are ``step.part``)."""
    if not isinstance(item, dict):
        return repr(item)
    kinds = {}
    for key in sorted(LITERAL_KEYS & set(item)):
        value = item[key]
        if key == "next" and isinstance(value, list):
            value = [str(v).split(".", 1)[0] for v in value]
        kinds[key] = value
    return repr(kinds) if kinds else repr(sorted(item))


def _diff_aligned(label: str, ref: list[Any], got: list[Any], path: str) -> list[Difference]:
    out: list[Difference] = []
    a, b = [signature(x) for x in ref], [signature(x) for x in got]
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal" or (op == "replace" and i2 - i1 == j2 - j1):
            for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                out += diff_shapes(label, ref[i], got[j], f"{path}[{i}]")
            continue
        for i in range(i1, i2):
            out.append(
                Difference(
                    label, f"{path}[{i}]", f"missing in longtask (reference: {brief(ref[i])})"
                )
            )
        for j in range(j1, j2):
            out.append(Difference(label, f"{path}[+{j}]", f"extra in longtask ({brief(got[j])})"))
    return out


def is_stream(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in value
    )


def diff_stream(label: str, ref: list[list[Any]], got: list[list[Any]]) -> list[Difference]:
    out: list[Difference] = []

    def by_event(parts: list[list[Any]]) -> dict[str, list[Any]]:
        grouped: dict[str, list[Any]] = {}
        for event, data in parts:
            grouped.setdefault(event_name(event), []).append(shape(data))
        return {k: collapse(v) for k, v in grouped.items()}

    a, b = by_event(ref), by_event(got)
    for event in a:
        if event not in b:
            out.append(
                Difference(
                    label,
                    f"[{event}]",
                    f"no such part from longtask ({len(a[event])} "
                    f"kinds in the reference, e.g. {brief(a[event][0])})",
                )
            )
        else:
            out += diff_shapes(label, a[event], b[event], f"[{event}]")
    for event in b:
        if event not in a:
            out.append(
                Difference(label, f"[{event}]", f"extra part from longtask ({brief(b[event][0])})")
            )
    first_a = list(dict.fromkeys(event_name(e) for e, _ in ref))
    first_b = list(dict.fromkeys(event_name(e) for e, _ in got))
    common_a = [e for e in first_a if e in first_b]
    common_b = [e for e in first_b if e in first_a]
    if common_a != common_b:
        out.append(
            Difference(
                label,
                "(order)",
                f"kinds of part first arrive as {common_a} in the "
                f"reference, {common_b} from longtask",
            )
        )
    return out


def diff_answer(label: str, ref: Any, got: Any) -> list[Difference]:
    ref_err = isinstance(ref, dict) and "__error__" in ref
    got_err = isinstance(got, dict) and "__error__" in got
    if ref_err or got_err:
        if ref_err and got_err and ref["__error__"] == got["__error__"]:
            return []
        what = lambda v, err: (  # noqa: E731
            f"refused {v['__error__']} {brief(v.get('detail'), 300)}" if err else "answered"
        )
        return [
            Difference(label, "", f"reference {what(ref, ref_err)}; longtask {what(got, got_err)}")
        ]
    if is_stream(ref) and is_stream(got):
        return diff_stream(label, ref, got)
    return diff_shapes(label, shape(ref), shape(got))


def diff_traces(ref: Sequence[tuple[str, Any]], got: Sequence[tuple[str, Any]]) -> list[Difference]:
    """Every difference between two traces of the same script (matched by label)."""
    out: list[Difference] = []
    theirs = dict(got)
    for label, answer in ref:
        if label not in theirs:
            out.append(Difference(label, "", "no such call in longtask's trace"))
            continue
        out += diff_answer(label, answer, theirs[label])
    mine = {label for label, _ in ref}
    out += [
        Difference(label, "", "call only in longtask's trace")
        for label, _ in got
        if label not in mine
    ]
    return out


def grouped(diffs: Sequence[Difference]) -> list[str]:
    """The differences by where and what, list indices aside: one line each, with how many
    calls or items show it and the first call that does (most frequent first)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for d in diffs:
        key = (re.sub(r"\[\+?\d+\]", "[i]", d.path), d.text)
        groups.setdefault(key, []).append(d.label)
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    return [
        f"{len(labels)}x {path or '(answer)'}: {text}  (e.g. {labels[0]})"
        for (path, text), labels in ordered
    ]


def split(
    diffs: Sequence[Difference], intended: Sequence[Intended]
) -> tuple[list[Difference], dict[Intended, list[Difference]]]:
    """(differences no intended one allows, intended ones -> what each allowed)."""
    used: dict[Intended, list[Difference]] = {i: [] for i in intended}
    left = []
    for d in diffs:
        for i in intended:
            if i.allows(d):
                used[i].append(d)
                break
        else:
            left.append(d)
    return left, used


#: The intended differences between longtask serve and LangGraph's server, each with its
#: reason. docs/internals/server-differences.md lists every reason.
_MSG = r"\[messages(\|[^\]]*)?\]\[\d+\]"
INTENDED: list[Intended] = [
    Intended(
        "*",
        r".*\.metadata\..*",
        "Metadata keys are each server's own: longtask records task_ref and "
        "longtask_status, LangGraph's server graph_id, langgraph_version, run_attempt and more.",
    ),
    Intended(
        "*",
        r".*\.configurable\..*",
        "A configuration's internal keys (langgraph_auth_user, __pregel_*, "
        "__request_start_time_ms__...) are LangGraph's server's; longtask echoes only thread_id, "
        "checkpoint_ns and checkpoint_id.",
    ),
    Intended(
        "runs.stream*",
        r"\[custom(\|[^\]]*)?\]",
        "The custom stream carries longtask's events (step.started, approval.required...), "
        "which a plain graph does not emit.",
        text="extra part from longtask.*",
    ),
    Intended(
        "*",
        r".*(messages(\|[^\]]*)?\]\[\d+\]\[0\]|messages\[\d+\]|chunk|output)"
        r"\.(usage_metadata|response_metadata\..+|additional_kwargs\.refusal)",
        "longtask's agent asks the model for its usage when it streams (stream_usage), so "
        "its AI messages and chunks carry usage and response metadata that LangGraph's "
        "example agent's streamed chunks lack.",
    ),
    Intended(
        "runs.stream*",
        _MSG + r"\[1\]\.(langgraph_api_url|langgraph_api_version|langgraph_host|langgraph_plan|"
        r"ls_integration|created_by|run_attempt|langgraph_version|lc_versions)",
        "A message's metadata has no deployment keys of LangGraph's server (langgraph_host, "
        "langgraph_plan, langgraph_api_url...).",
    ),
    Intended(
        "runs.stream*",
        r"\[(checkpoints|debug)\]\[\+\d+\]",
        "An approval's two nodes make one more checkpoint per approval in the checkpoints "
        "and debug streams too.",
        text=r"extra in longtask .*",
    ),
    Intended(
        "runs.stream*",
        r"\[messages(\|[^\]]*)?\]\[\+?\d+\]",
        "messages-tuple sends more parts for longtask's agent than for LangGraph's example "
        "agent: its streamed answers end with a usage chunk, and the conversation's closing "
        "message (the final steps' results) is sent whole.",
        text=r"(extra|missing) in longtask .*",
    ),
    Intended(
        "threads.get_history*",
        r"(\[\+\d+\]|\[\d+\]\.(values\.approve|interrupts\[\d+\]|tasks\[\d+\]\.interrupts\[\d+\]))",
        "An approval is two nodes, step.request (records the request) and step.ask (the "
        "interrupt), so the history has one more checkpoint per approval: the one after "
        "step.request; the entries after it are one further down.",
    ),
    Intended(
        "runs.stream*",
        r"\[(tasks|debug)(\|[^\]]*)?\](\[\d+\]|\[\+\d+\])?(\.payload)?"
        r"(\.result\.pause\..*|\.interrupts.*)?",
        "An approval's two nodes are two tasks in the tasks and debug streams (the request "
        "node's result is its request; its interrupt shows on the ask node's task).",
        text=r"(extra in longtask|missing in longtask).*",
    ),
    Intended(
        "*",
        r".*messages(\|[^\]]*)?\]?(\[\d+\])*(\[0\])?\.name|.*\.output\.name",
        "An agent step's AI messages are named after the step (LangChain's create_agent "
        "name), so a chat UI can tell several agents apart; LangGraph's example agent has "
        "no name.",
        text=r"reference 'null', longtask 'str'",
    ),
    Intended(
        "*",
        r".*messages\[\+?\d+\]",
        "When every step is done, the conversation ends with one AI message holding the "
        "final steps' results (a task's last step need not be an agent's answer).",
        text=r"extra in longtask \(\{'additional_kwargs': \{\}, 'content': 'str', 'id': "
        r"'str', 'invalid_tool_calls': \[\], 'name': 'null'.*",
    ),
    Intended(
        "runs.stream*",
        r"\[events\].*",
        "The events stream is made from the run's own parts (on_chain_start/on_chain_end "
        "per step, on_chat_model_end per whole model message, on_custom_event per longtask "
        "event), not from LangChain's callback tree: no token events, no tool or model "
        "start events, no per-runnable inputs and tags.",
    ),
    Intended(
        "runs.stream*",
        r".*checkpoint_map\..*",
        "A subgraph's checkpoint_map is keyed by its namespace, which holds the task id: "
        "each run's own.",
    ),
    Intended(
        "runs.stream*",
        r"\[(tasks|debug|checkpoints)(\|[^\]]*)?\]\[\d+\](\.payload)?\.(input|result|"
        r"tasks\[\d+\]\.(state|checkpoint))(\..*)?",
        "A task's input and result are shown as the API shows state (results by step "
        "name; an agent's conversation is the thread's messages, not a channel of the "
        "task graph), and a pending task's subgraph state is in its own checkpoints parts.",
    ),
    Intended(
        "threads.get_history*",
        r"\[\d+\]\.tasks\[\d+\]\.(checkpoint|result)(\..*)?",
        "A past task's result is its step's result by step name, and its subgraph "
        "checkpoint is not named in the history (get_state(subgraphs=True) has it).",
    ),
    Intended(
        "*after update*",
        r".*",
        "update_state during a pause restarts the steps after the updated one: the thread "
        "is idle with its next steps, and the approval is asked again (with a plan from the "
        "new results) by the next run; a resume sent before then is refused, since no "
        "decision may be made for a plan nobody was shown.",
    ),
    Intended(
        "assistants.update the graph's own",
        "",
        "A registered task's own assistant (one per task, as LangGraph's server makes one "
        "per graph) cannot be changed or deleted (409): it is the task as serve was given "
        "it; an assistant created from it (POST /assistants) holds a configuration.",
        text=r"reference answered; longtask refused 409 .*",
    ),
    Intended(
        "threads.copy paused",
        r"\.status",
        "A copy of a paused thread waits at the same pause, so it says interrupted, as its "
        "source does; LangGraph's server calls every new copy idle, though its checkpoint "
        "holds the same interrupt.",
        text=r"reference 'idle', longtask 'interrupted'",
    ),
    Intended(
        "threads.prune keep_latest",
        r"",
        "longtask prunes an ended thread to its latest checkpoint (keep_latest, as LangGraph's "
        "PostgreSQL runtime does); LangGraph's in-memory runtime, the reference here, refuses "
        "keep_latest with 422.",
        text=r"reference refused 422 .*; longtask answered",
    ),
    Intended(
        "*goto __end__*",
        r".*",
        'goto "__end__" is refused (409, naming cancel): a longtask thread ends when its '
        "steps are done, or by a cancel, which runs its compensations and is recorded.",
    ),
    Intended(
        "a2a message/send in a finished context",
        r".*",
        "An A2A message without a taskId in the context of a finished task is refused: a "
        "context is a thread, and a longtask thread runs its task once (LangGraph's server "
        "starts another task there); send it without a contextId to start a new task.",
    ),
]


#: the differences of a plain LangGraph graph served by longtask (``test_lg_plain_diff.py``)
#: allowed on purpose, each with its reason (docs/internals/server-differences.md lists it)
PLAIN_INTENDED: list[Intended] = [
    *(
        i
        for i in INTENDED
        if i.reason.startswith(
            (
                "Metadata keys are each server's own",
                "A configuration's internal keys",
                "A message's metadata has no deployment keys",
                "A subgraph's checkpoint_map is keyed by its namespace",
            )
        )
    ),
    Intended(
        "runs.join_stream nest*",
        r".*",
        "LangGraph's in-memory server can miss an event sent while a run's stream was being "
        "dropped when the stream is joined again with Last-Event-ID (seen under load); "
        "longtask sends every event after the last id, none twice.",
    ),
    Intended(
        "threads.get_state*",
        r".*checkpoint_map\..*",
        "A subgraph's checkpoint_map is keyed by its namespace, which holds the task id: "
        "each run's own.",
    ),
    Intended(
        "threads.get_history*",
        r"\[\d+\]\.tasks\[\d+\]\.result\.messages\[\d+\]\.(role|type|id)",
        "A served graph's run input is recorded with the thread, its chat messages as "
        "LangChain message dicts with stable ids, and a task's result in the history is its "
        "write as the node made it: the input task shows the messages so (not as sent), and "
        "a tool's message has the id the state gave it only in the state.",
    ),
    Intended(
        "runs.stream*",
        r"\[updates\]\[\d+\]\.\w+\.messages\[\d+\]\.id",
        "A node's update is streamed as the node wrote it: a tool's message has no id until "
        "the state's reducer gives it one. LangGraph's server, when it streams messages too, "
        "sets an id on the update's message object, sometimes before the update is sent.",
        text=r"reference 'str', longtask 'null'",
    ),
]
