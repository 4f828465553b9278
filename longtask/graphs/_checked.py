"""LangGraph's ``update_state`` on a compiled task: applied as a step's result, or refused.

LangGraph itself drops an update of a key that is not a channel without a word, and stores
whatever value it is given. On a task that would mean a result nobody can read back (a
``datetime``), a reference to a value that was never stored, or an update that did
nothing. So the compiled graph checks every update first (``update_state``,
``bulk_update_state`` and their async twins all pass through ``bulk_update_state``):

- a key is a channel (``out.<step>``, ``lt.inputs``, ...) or a step's name, which stands for
  its result channel (as in ``Runner.resume(thread, Command(update={step: value}))``);
- a step's result is encoded as a step's own return value is (a large one goes to the blob
  table, a pydantic model keeps its class), after the same JSON check;
- the task's inputs are validated against its inputs model;
- a stored object of longtask's (``{"$longtask": "blob", ...}``) must exist;
- the result (or request) of an approval or a wait is never set: a decision is made by
  ``approve``/``reject`` and an event delivered by ``signal``, which check the approvers,
  the plan hash, the deadline and the schema, and record who answered. A state update
  that set it would let anybody who may write state run the gated step (``pause_write``).

Anything else raises :class:`InvalidInput` before LangGraph writes anything.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from langgraph.types import StateUpdate

from longtask.errors import InvalidInput
from longtask.model import LongTask, PauseStep
from longtask.steps import INPUTS_CHANNEL, fix_channel, request_channel, result_channel
from longtask.store import Store, ValueCodec
from longtask.store._values import TAG, is_reference, to_json_bytes

#: pause channels longtask's own code may write back unchanged (a fork rewrites the stored
#: decision of a join's other dependency so the join runs again; see ``Runner.fork``)
_REWRITES: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "longtask_pause_rewrites", default=frozenset()
)


@contextlib.contextmanager
def rewriting(channels: Iterable[str]) -> Iterator[None]:
    """Let the update in this block write ``channels`` (stored pause values, unchanged)."""
    token = _REWRITES.set(frozenset(channels))
    try:
        yield
    finally:
        _REWRITES.reset(token)


def pause_write(task: LongTask, key: str, thread_id: str | None = None) -> InvalidInput | None:
    """The error for a state write of ``key`` (a step name or a channel) that would answer
    an approval or a wait without its checks, or None if ``key`` is no such thing."""
    for name, step in task.steps.items():
        if not isinstance(step, PauseStep) or key not in (
            name,
            result_channel(name),
            request_channel(name),
        ):
            continue
        thread = thread_id or "THREAD"
        if step.kind == "approval":
            how = (
                f"decide it with `longtask approve {thread} {name} --by NAME` (or reject), or "
                'a run with command={"resume": ...}'
            )
            what = "an approval: its result is a decision"
        else:
            how = (
                f"deliver it with `longtask signal {thread} {name} --payload JSON`, or a run "
                'with command={"resume": ...}'
            )
            what = "a wait: its result is the event it waits for"
        return InvalidInput(
            f"step {name!r} is {what}, which a state update cannot set (that would skip its "
            f"checks and leave no record of who answered); {how}"
        )
    return None


def channels_of(task: LongTask) -> dict[str, str]:
    """Every channel of the task's state, to what it holds."""
    out = {INPUTS_CHANNEL: "the task inputs"}
    for name, step in task.steps.items():
        out[result_channel(name)] = f"the result of step {name!r}"
        out[fix_channel(name)] = f"the fix loop of step {name!r}"
        if isinstance(step, PauseStep):
            out[request_channel(name)] = f"the request of pause {name!r}"
    return out


class UpdateCheck:
    """Checks and encodes the values of state updates for one task."""

    def __init__(
        self,
        task: LongTask,
        codec: ValueCodec,
        store: Store,
        validate_inputs: Callable[[Any], Any],
    ) -> None:
        self._task = task
        self._codec = codec
        self._store = store
        self._validate_inputs = validate_inputs
        self._channels = channels_of(task)

    def values(self, values: Any) -> Any:
        if values is None:
            return None
        if not isinstance(values, Mapping):
            raise InvalidInput(
                f"a state update of task {self._task.name!r} is a dict of channels to values "
                f"(such as {{'out.step': result}}), not a {type(values).__name__}"
            )
        checked: dict[str, Any] = {}
        for key, value in values.items():
            channel = key
            if key in self._task.steps:
                channel = result_channel(key)
            elif key not in self._channels:
                raise InvalidInput(
                    f"{key!r} is not a step or a channel of task {self._task.name!r}, so "
                    "LangGraph would ignore this update; use a step's name or its channel "
                    f"(steps: {', '.join(self._task.steps)})"
                )
            if channel in checked:
                raise InvalidInput(f"the update sets {channel!r} twice (as {key!r} too)")
            refused = pause_write(self._task, channel)
            if refused is not None and channel not in _REWRITES.get():
                raise refused
            checked[channel] = self._value(channel, value)
        return checked

    def _value(self, channel: str, value: Any) -> Any:
        what = self._channels[channel]
        if is_reference(value):
            self._check_reference(value, what)
            return value
        if channel == INPUTS_CHANNEL:
            return self._codec.encode(self._validate_inputs(value), what)
        if channel.startswith("out."):
            return self._codec.encode(value, what)
        # The bookkeeping channels of pauses and fix loops hold plain JSON.
        to_json_bytes(value, what)
        return value

    def _check_reference(self, value: dict[str, Any], what: str) -> None:
        digest = value.get("digest") if TAG in value else value.get("ref")
        if digest is not None and self._store.get_blob(str(digest)) is None:
            raise InvalidInput(
                f"{what} refers to a stored value {digest} that is not in this database; "
                "give the value itself instead"
            )


def check_updates(
    supersteps: Sequence[Sequence[StateUpdate]], check: UpdateCheck
) -> list[list[StateUpdate]]:
    return [
        [StateUpdate(check.values(u.values), u.as_node, u.task_id) for u in step]
        for step in supersteps
    ]


def install_update_check(graph: Any, check: UpdateCheck) -> None:
    """Route the compiled ``graph``'s state updates through ``check``."""
    bulk = graph.bulk_update_state
    abulk = graph.abulk_update_state

    def bulk_update_state(config: Any, supersteps: Any) -> Any:
        return bulk(config, check_updates(supersteps, check))

    async def abulk_update_state(config: Any, supersteps: Any) -> Any:
        return await abulk(config, check_updates(supersteps, check))

    # update_state and aupdate_state call these through the instance.
    graph.bulk_update_state = bulk_update_state
    graph.abulk_update_state = abulk_update_state
