"""The gate every outside write of a thread's state passes.

An *outside write* is any change of a thread's state that does not come from a step's own
node: LangGraph's ``update_state``/``bulk_update_state`` (and their async twins) on the
compiled graph, ``Runner.resume(Command(update=...))`` and ``resume --update``, ``fork
--set``, the Server API's state endpoints and runs with ``command.update``. Each door only
translates its request into a call of :meth:`Gate.write` (or :meth:`Gate.check`, to refuse
in a request what the write would refuse); the rules live here, and the compiled graph's
own ``bulk_update_state`` is routed through the gate, so no door can go around it.

The rule, decided on the state of the checkpoint the write applies to (an allowlist):

- a write may set the result of a step (by its name or ``out.<step>``) that no unanswered
  pause guards: not an approval's or a wait's result (a decision is made by
  ``approve``/``reject``, an event delivered by ``signal``, which check approvers, plan hash,
  deadline and schema and record who answered), not a step that waits for an answer now
  (a tool approval, a budget or permission gate), and not a step that comes after an
  unanswered approval or wait (it would run, or read as done, without the decision);
- the task's inputs (``inputs``/``lt.inputs``) only while no pause has been reached: a
  pause's request, and its answer, were made from the inputs it saw;
- never a pause's request, a fix loop's bookkeeping or any channel of LangGraph's own;
- ``as_node`` is a step the write may set (LangGraph runs what follows it), never a pause,
  a part of one (``<step>.ask``/``.request``), nor ``__end__``/``__input__``/``__copy__``;
- a value written back unchanged (a fork re-writing a join's other dependencies) changes
  no outcome and is always allowed;
- every ``$longtask`` reference must resolve: a stored blob, an importable model, a map
  step's items of this thread and step;
- a finished thread (completed or cancelled) is changed only by ``fork``, which makes a new
  branch from a past checkpoint; a thread that another process advances is refused.

An accepted write stores a ``manual.update`` event (door, steps, ``as_node``, ``by``) in the
transaction of the checkpoint it makes; a refused one raises :class:`InvalidInput` (or
:class:`ThreadBusy`) before anything is written.

A write is also refused while an accepted answer or command waits to be carried out (a run
of the Server API, a worker's inbox), checked again in the transaction of the checkpoint it
makes; a run is recorded only if the thread's latest checkpoint is still the one its
request was checked against (``store.api_run_mark``). So of an answer and a write made at
once, whichever commits second sees the first: an accepted answer is never voided.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langgraph.types import StateUpdate

from longtask.errors import InvalidInput, LongTaskError, ThreadBusy
from longtask.model import PauseStep
from longtask.runtime._who import check_by
from longtask.steps import INPUTS_CHANNEL, request_channel, result_channel
from longtask.store import NewEvent
from longtask.store._apiruns import OPEN_RUN_STATUSES, queued_for
from longtask.store._values import TAG, to_json_bytes

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph.state import CompiledStateGraph

    from longtask.checkpointers import Database
    from longtask.model import LongTask
    from longtask.runtime._queue import Queue
    from longtask.store import EventWriter, ThreadRecord, ValueCodec

#: names LangGraph gives special meaning as ``as_node``: none is a step
_SPECIAL_NODES = frozenset({"__end__", "__input__", "__copy__", "__start__", "__interrupt__"})
#: statuses of a thread that only a fork may change
FINISHED = frozenset({"completed", "cancelled"})


@dataclass(frozen=True)
class Door:
    """Which door a write came through, and who made it."""

    name: str
    by: str | None = None
    #: events the door's own record adds, stored with the write's checkpoint
    also: tuple[NewEvent, ...] = ()


#: the door of the write in progress (a door sets it around its call of the graph)
_DOOR: contextvars.ContextVar[Door | None] = contextvars.ContextVar("longtask_door", default=None)
#: threads whose lock and lease this context already holds (a run applying its command)
_HELD: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "longtask_gate_held", default=frozenset()
)
#: set by longtask's own controls that write state with checks of their own (skip, asking
#: a failed pause again): they are not outside writes
_TRUSTED: contextvars.ContextVar[bool] = contextvars.ContextVar("longtask_trusted", default=False)


@contextlib.contextmanager
def trusted() -> Iterator[None]:
    """A block in which longtask's own controls write state past the gate."""
    token = _TRUSTED.set(True)
    try:
        yield
    finally:
        _TRUSTED.reset(token)


@contextlib.contextmanager
def through(door: str, by: str | None = None, also: Sequence[NewEvent] = ()) -> Iterator[None]:
    """Name the door (and who) of the graph updates made in this block; ``also`` are events
    of the door's own that commit with the write (and are dropped with a refused one)."""
    token = _DOOR.set(Door(door, by, tuple(also)))
    try:
        yield
    finally:
        _DOOR.reset(token)


@contextlib.contextmanager
def holding(thread_id: str) -> Iterator[None]:
    """Say that this context holds ``thread_id``'s lock and lease (a run, or a door that
    took them): the gate writes without taking them again."""
    token = _HELD.set(_HELD.get() | {thread_id})
    try:
        yield
    finally:
        _HELD.reset(token)


@dataclass
class _Seen:
    """What the gate reads of the checkpoint a write applies to."""

    values: dict[str, Any]
    #: steps waiting for an answer there (their node holds an interrupt)
    waiting: set[str]
    #: approvals and waits with no answer there
    unanswered: set[str]
    #: pauses whose request was made (reached), answered or not
    reached: set[str]
    #: the steps no outside write may set: ``unanswered``, ``waiting`` and every step after one
    guarded: dict[str, str] = field(default_factory=dict)


class Gate:
    """Decides, records and applies outside writes of threads in ``db``."""

    def __init__(
        self,
        db: Database,
        codec: ValueCodec,
        events: EventWriter,
        queue: Queue,
        validate_inputs: Callable[[LongTask, Any], Any],
        whoami: Callable[[], str],
    ) -> None:
        self.db = db
        self.codec = codec
        self.events = events
        self._queue = queue
        self._validate_inputs = validate_inputs
        self._whoami = whoami

    # -- the doors' calls ------------------------------------------------------------------

    def install(self, task: LongTask, graph: CompiledStateGraph[Any, Any, Any, Any]) -> None:
        """Route ``graph``'s state updates (``update_state``, ``bulk_update_state`` and
        their async twins, which LangGraph calls through these two) through the gate."""
        raw = graph.bulk_update_state

        def bulk_update_state(config: Any, supersteps: Any) -> Any:
            if _TRUSTED.get():
                return raw(config, supersteps)
            door = _DOOR.get() or Door("update_state")
            return self._write(task, graph, raw, config, supersteps, door)

        async def abulk_update_state(config: Any, supersteps: Any) -> Any:
            # The sync path in a thread: one gate, and the saver's async calls are its sync
            # ones in a thread too.
            return await asyncio.to_thread(bulk_update_state, config, supersteps)

        graph.bulk_update_state = bulk_update_state  # type: ignore[method-assign]
        graph.abulk_update_state = abulk_update_state  # type: ignore[method-assign]

        # A Command(update=...) handed to the graph itself would be applied by LangGraph
        # as the run's first writes, past every check: refused, naming the doors.
        stream, astream = graph.stream, graph.astream

        def checked_stream(input: Any, *args: Any, **kwargs: Any) -> Any:
            _refuse_command_update(input)
            return stream(input, *args, **kwargs)

        def checked_astream(input: Any, *args: Any, **kwargs: Any) -> Any:
            _refuse_command_update(input)
            return astream(input, *args, **kwargs)

        graph.stream = checked_stream  # type: ignore[method-assign]
        graph.astream = checked_astream  # type: ignore[method-assign]

    def check(
        self,
        task: LongTask,
        graph: CompiledStateGraph[Any, Any, Any, Any],
        thread_id: str,
        values: Any,
        *,
        as_node: str | None = None,
        door: str,
        checkpoint_id: str | None = None,
        held: bool = False,
    ) -> None:
        """Refuse (InvalidInput, ThreadBusy) what the write would refuse, writing nothing: for
        a request that records the write and lets a run or a worker carry it out. ``held``:
        the caller holds the thread's lock (else a thread another process advances is
        refused, as the write would be)."""
        if not held:
            if self.db.is_locked(thread_id):
                raise ThreadBusy(thread_id)
            self._check_queue(thread_id)
        rec = self._record(thread_id)
        self._check_status(rec, "fork" if door == "fork" or checkpoint_id else door)
        seen = self._seen(task, graph, _cfg(thread_id, checkpoint_id))
        self._plan(task, thread_id, seen, [[StateUpdate(values, as_node)]], encode=False)

    # -- the write -------------------------------------------------------------------------

    def _write(
        self,
        task: LongTask,
        graph: CompiledStateGraph[Any, Any, Any, Any],
        raw: Callable[[Any, Any], Any],
        config: Any,
        supersteps: Any,
        door: Door,
    ) -> RunnableConfig:
        conf = (config or {}).get("configurable") or {}
        thread_id = conf.get("thread_id")
        if not isinstance(thread_id, str) or not thread_id:
            raise InvalidInput('a state update needs {"configurable": {"thread_id": ...}}')
        if conf.get("checkpoint_ns"):
            raise InvalidInput(
                "a state update applies to the task's own state (checkpoint_ns ''), not to a "
                f"step's inner graph ({conf['checkpoint_ns']!r})"
            )
        if not isinstance(supersteps, Sequence) or not supersteps:
            raise InvalidInput("a state update needs at least one update")
        if door.by is not None:
            check_by(door.by)  # recorded in the event: one line, a name
        held = thread_id in _HELD.get()
        if not held:
            # Before the lock too: a refused write must not hold the thread even for a moment
            # (the executor carrying out the queued answer would find it busy).
            self._check_queue(thread_id)
        with contextlib.ExitStack() as stack:
            if not held:
                stack.enter_context(self.db.lock(thread_id))
                self._check_queue(thread_id)
            rec = self._record(thread_id)
            # A write at a named checkpoint is LangGraph's fork: a new branch from there.
            forks = door.name == "fork" or bool(conf.get("checkpoint_id"))
            self._check_status(rec, "fork" if forks else door.name)
            target = _cfg(thread_id, conf.get("checkpoint_id"))
            seen = self._seen(task, graph, target)
            planned = self._plan(task, thread_id, seen, supersteps, encode=True)
            if not held:
                stack.enter_context(self._queue.lease(thread_id, f"gate:{door.name}"))
                # Checked again in the transaction of each checkpoint it writes, ordered
                # with the recording of an answer (which takes no lock of the thread's):
                # an answer recorded first refuses the write; one recorded after sees the
                # write's checkpoint and is refused (store.api_run_mark).
                guard = functools.partial(self._queue_guard, thread_id)
                stack.enter_context(self.db.saver.guarded(thread_id, guard))
            written = sorted({c for step in planned for u in step for c in (u.values or {})})
            # the steps whose result it changes (a fork also writes a join's other
            # dependencies back as they are)
            changed = sorted(
                {
                    c[4:]
                    for step in planned
                    for u in step
                    for c, v in (u.values or {}).items()
                    if c.startswith("out.") and not self._unchanged(seen, c, v)
                }
            )
            mine = [
                *door.also,
                NewEvent(
                    thread_id,
                    "manual.update",
                    key=f"manual.update/{uuid.uuid4().hex}",
                    data={
                        "door": door.name,
                        "by": door.by or self._whoami(),
                        "steps": changed,
                        "channels": written,
                        "as_node": sorted({str(u.as_node) for step in planned for u in step}),
                        "checkpoint": conf.get("checkpoint_id"),
                        "fork": forks,
                    },
                ),
            ]
            for event in mine:
                self.events.put(event)
            try:
                new = raw(target, planned)
            except BaseException as exc:
                # Nothing of it was stored: take back the record of a write that did not
                # happen (and any blob it handed over), leaving what others queued.
                keys = {e.key for e in mine}
                left = [e for e in self.events.take(thread_id) if e.key not in keys]
                if left:
                    self.events.restore(thread_id, left)
                self.events.take_blobs(thread_id)
                if type(exc).__name__ == "InvalidUpdateError":
                    raise InvalidInput(f"LangGraph refused the update: {exc}") from exc
                raise
            self._after(task, graph, rec, forks)
        return new  # type: ignore[no-any-return]

    def _after(
        self,
        task: LongTask,
        graph: CompiledStateGraph[Any, Any, Any, Any],
        rec: ThreadRecord,
        forks: bool,
    ) -> None:
        """The thread's status after an accepted write: a fork, or a write that restarted the
        steps after a pause (which asks again when a run reaches it), leaves it idle."""
        thread_id = rec.thread_id
        if forks:
            self.db.store.set_status(thread_id, "pending")
            return
        if rec.status in ("waiting_user", "waiting_external"):
            head = graph.get_state(_cfg(thread_id))
            if not any(t.interrupts for t in head.tasks):
                self.db.store.set_status(thread_id, "pending")

    # -- the rule --------------------------------------------------------------------------

    def _record(self, thread_id: str) -> ThreadRecord:
        rec = self.db.store.get_thread(thread_id)
        if rec is None:
            raise InvalidInput(
                f"no thread {thread_id!r} in this database: a state update changes a started "
                "thread (start one with `longtask run` or Runner.start)"
            )
        return rec

    def _check_queue(self, thread_id: str) -> None:
        """Refuse a write while an answer or a command for the thread waits to be carried
        out (a Server API run, a worker's inbox): it was accepted for the state as it is,
        and a write before it could void it (an approval whose plan then changed)."""
        store = self.db.store
        queued = [r for r in store.api_runs(thread_id, limit=20) if r.status in OPEN_RUN_STATUSES]
        if queued or store.inbox_peek(thread_id):
            raise InvalidInput(_queued_refusal(thread_id))

    def _queue_guard(self, thread_id: str, tx: Any) -> None:
        """``_check_queue`` in a checkpoint's transaction (see ``LongTaskSaver.guarded``)."""
        postgres = self.db.store.dialect.name == "postgresql"
        if queued_for(tx.query, thread_id, postgres=postgres):
            raise InvalidInput(_queued_refusal(thread_id))

    @staticmethod
    def _check_status(rec: ThreadRecord, door: str) -> None:
        check_status(rec, door)

    def _seen(
        self, task: LongTask, graph: CompiledStateGraph[Any, Any, Any, Any], config: Any
    ) -> _Seen:
        snapshot = graph.get_state(config)
        conf = config["configurable"]
        if conf.get("checkpoint_id") and not snapshot.created_at:
            raise InvalidInput(
                f"thread {conf['thread_id']!r} has no checkpoint {conf['checkpoint_id']!r}; "
                f"see `longtask history {conf['thread_id']}`"
            )
        values = dict(snapshot.values or {})
        waiting = {t.name.split(".", 1)[0] for t in snapshot.tasks if t.interrupts}
        pauses = [n for n, s in task.steps.items() if isinstance(s, PauseStep)]
        unanswered = {p for p in pauses if result_channel(p) not in values}
        reached = {p for p in pauses if request_channel(p) in values or p not in unanswered}
        seen = _Seen(values, waiting, unanswered, reached)
        blockers = unanswered | waiting
        for name in task.steps:
            if name in blockers:
                seen.guarded[name] = name
                continue
            before = sorted(blockers & task.layout[name].ancestors)
            if before:
                seen.guarded[name] = before[0]
        return seen

    def _plan(
        self,
        task: LongTask,
        thread_id: str,
        seen: _Seen,
        supersteps: Any,
        *,
        encode: bool,
    ) -> list[list[StateUpdate]]:
        out: list[list[StateUpdate]] = []
        for step in supersteps:
            if not isinstance(step, Sequence) or not step:
                raise InvalidInput("each super-step of a bulk update is a list of updates")
            planned: list[StateUpdate] = []
            for update in step:
                values, as_node = update[0], update[1] if len(update) > 1 else None
                task_id = update[2] if len(update) > 2 else None
                planned += self._one(task, thread_id, seen, values, as_node, task_id, encode)
            out.append(planned)
        return out

    def _one(
        self,
        task: LongTask,
        thread_id: str,
        seen: _Seen,
        values: Any,
        as_node: Any,
        task_id: Any,
        encode: bool,
    ) -> list[StateUpdate]:
        name = task.name
        if not isinstance(values, Mapping) or not values:
            raise InvalidInput(
                f"a state update of task {name!r} sets step results: a non-empty object of "
                f"step name to result (steps: {', '.join(task.steps)}), not "
                f"{'nothing' if not values else type(values).__name__}"
            )
        channels: dict[str, Any] = {}
        for key, value in values.items():
            channel = self._channel(task, thread_id, key)
            if channel in channels:
                raise InvalidInput(f"the update sets {channel!r} twice (as {key!r} too)")
            channels[channel] = value
        if as_node is not None:
            self._check_as_node(task, thread_id, seen, as_node, channels)
        checked: dict[str, Any] = {}
        for channel, value in channels.items():
            checked[channel] = self._value(task, thread_id, seen, channel, value, encode)
        steps = [c[4:] for c in checked if c.startswith("out.")]
        if as_node is not None or len(steps) <= 1:
            # No node named: the step whose result it is (LangGraph alone would take the
            # last node that ran, which may be a part of a pause); new inputs alone count as
            # the task's input, so its first steps run on them.
            node = as_node if as_node is not None else (steps[0] if steps else "__start__")
            return [StateUpdate(checked, node, task_id)]
        # Several steps' results at once: each as if its own step had returned it (LangGraph
        # needs a node per update), in one super-step.
        rest = {c: v for c, v in checked.items() if not c.startswith("out.")}
        out = [StateUpdate({c: v}, c[4:]) for c, v in checked.items() if c.startswith("out.")]
        if rest:
            out[0] = StateUpdate({**(out[0].values or {}), **rest}, out[0].as_node)
        return out

    @staticmethod
    def _channel(task: LongTask, thread_id: str, key: Any) -> str:
        if not isinstance(key, str):
            raise InvalidInput(f"a state update's keys are step names, not {key!r}")
        if key.startswith("pause.") and isinstance(task.steps.get(key[6:]), PauseStep):
            raise InvalidInput(pause_refusal(task, key[6:], thread_id))
        if key in task.steps:
            return result_channel(key)
        if key in ("inputs", INPUTS_CHANNEL):
            return INPUTS_CHANNEL
        if key.startswith("out.") and key[4:] in task.steps:
            return key
        internal = key.startswith(("pause.", "fix.")) or key.startswith(("__", "branch:"))
        if internal:
            raise InvalidInput(
                f"{key!r} is one of longtask's internal channels of task {task.name!r}: a state "
                "update sets step results (by step name) or the task's inputs, nothing else"
            )
        raise InvalidInput(
            f"{key!r} is not a step of task {task.name!r}: a state update sets step results "
            f"by step name (steps: {', '.join(task.steps)}) or 'inputs'"
        )

    def _check_as_node(
        self, task: LongTask, thread_id: str, seen: _Seen, as_node: Any, channels: dict[str, Any]
    ) -> None:
        if not isinstance(as_node, str) or as_node in _SPECIAL_NODES or as_node not in task.steps:
            part = as_node.split(".", 1)[0] if isinstance(as_node, str) else None
            where = (
                f": it is part of the pause {part!r}"
                if part in task.steps and isinstance(task.steps[part], PauseStep)
                else ""
            )
            raise InvalidInput(
                f"as_node {as_node!r} is not a step of task {task.name!r}{where}; name the step "
                "whose result the update sets (or leave as_node out)"
            )
        channel = result_channel(as_node)
        if channel in channels and self._unchanged(seen, channel, channels[channel]):
            return  # written back as it is: its successors run again, nothing is decided
        refused = self._guarded(task, thread_id, seen, as_node)
        if refused is not None:
            raise InvalidInput(f"as_node {as_node!r}: {refused}")

    def _guarded(self, task: LongTask, thread_id: str, seen: _Seen, step: str) -> str | None:
        """Why an outside write may not set ``step``'s result here, or None."""
        kind = task.steps[step]
        if isinstance(kind, PauseStep):
            return pause_refusal(task, step, thread_id)
        blocker = seen.guarded.get(step)
        if blocker is None:
            return None
        if blocker == step:
            return (
                f"step {step!r} is waiting for an answer; answer it (`longtask pending`), "
                "then its result is its own"
            )
        what = task.steps[blocker]
        if isinstance(what, PauseStep):
            how = _answer_command(what.kind, thread_id, blocker)
            return (
                f"step {step!r} comes after the {_pause_word(what.kind)} {blocker!r}, which has "
                "no answer yet: a result written there would let it run (or count as done) "
                f"without that decision; answer it first ({how})"
            )
        return (
            f"step {step!r} comes after step {blocker!r}, which is waiting for an answer; "
            "answer it first (`longtask pending`)"
        )

    def _value(
        self, task: LongTask, thread_id: str, seen: _Seen, channel: str, value: Any, encode: bool
    ) -> Any:
        if self._unchanged(seen, channel, value):
            return value
        if channel == INPUTS_CHANNEL:
            if seen.reached:
                first = sorted(seen.reached)[0]
                raise InvalidInput(
                    f"the inputs of thread {thread_id!r} cannot change here: the "
                    f"{_pause_word(task.steps[first].kind)} {first!r} was asked (or answered) "
                    "about the inputs it saw; fork from a checkpoint before it to run on other "
                    "inputs"
                )
            checked = self._validate_inputs(task, value)
            return self.codec.encode(checked, "the task inputs") if encode else checked
        step = channel[4:]
        refused = self._guarded(task, thread_id, seen, step)
        if refused is not None:
            raise InvalidInput(refused)
        return self.outside_result(thread_id, step, value, encode=encode)

    def outside_result(self, thread_id: str, step: str, value: Any, *, encode: bool) -> Any:
        """``value``, given from outside as the result of ``step`` (a state update, a
        skip), as its channel holds it: a ``$longtask`` reference must name what this
        database stores for this thread (else InvalidInput); any other value is checked as
        JSON (``encode`` False) or encoded, its blob handed to the thread's next write."""
        what = f"the result of step {step!r}"
        if isinstance(value, dict) and TAG in value:
            self._resolve(thread_id, step, value, what)
            return value
        if not encode:
            to_json_bytes(value, what)
            return value
        return self.codec.encode(value, what, thread_id=thread_id)

    @staticmethod
    def _unchanged(seen: _Seen, channel: str, value: Any) -> bool:
        return channel in seen.values and seen.values[channel] == value

    def _resolve(self, thread_id: str, step: str, value: dict[str, Any], what: str) -> None:
        """A stored reference given as a value must name what is stored, for this thread."""
        kind = value.get(TAG)
        if kind == "skipped":
            raise InvalidInput(
                f"{what} cannot be set to a skip mark: skipping is `longtask skip` (or a "
                "pause's skip_to), which records who skipped what"
            )
        if kind == "map" and (value.get("thread") != thread_id or value.get("step") != step):
            raise InvalidInput(
                f"{what} refers to the items of another map step ({value.get('thread')!r}, "
                f"{value.get('step')!r}); give the value itself instead"
            )
        try:
            self.codec.decode(value, strict=True)
        except (LongTaskError, KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(
                f"{what} refers to a stored value that is not in this database (or cannot be "
                f"read: {exc}); give the value itself instead"
            ) from exc


def check_status(rec: ThreadRecord, door: str) -> None:
    """Refuse (InvalidInput) a write through ``door`` of a thread that is no longer changed
    in place: a finished one (only a fork makes a new branch of a completed thread), one
    cancelled or being cancelled. Every outside write asks this: state updates, commands'
    gotos, runs."""
    thread_id = rec.thread_id
    if rec.status == "cancelled":
        raise InvalidInput(
            f"thread {thread_id!r} was cancelled (its compensations undid its steps' "
            "effects): its state is no longer changed, not even by a fork; start a new "
            "thread to do the work again"
        )
    if rec.status in FINISHED and door != "fork":
        if door == "goto":
            how = (
                "to run a step again, fork it from a checkpoint before that step, giving a "
                f"step before it its result, and run on (`longtask history {thread_id}`, "
                f"then `longtask fork {thread_id} CHECKPOINT --set STEP=JSON` and "
                f"`longtask resume {thread_id}`)"
            )
        else:
            how = (
                "fork it from a checkpoint to change a result and run on from there "
                f"(`longtask history {thread_id}`, then `longtask fork {thread_id} CHECKPOINT "
                "--set STEP=JSON`)"
            )
        raise InvalidInput(
            f"thread {thread_id!r} is {rec.status}: a finished thread is not changed in "
            f"place; {how}"
        )
    if rec.status == "cancelling":
        raise InvalidInput(
            f"thread {thread_id!r} is being cancelled: its state is no longer changed"
        )


def _queued_refusal(thread_id: str) -> str:
    return (
        f"thread {thread_id!r} has a run or an answer waiting to be carried out; change its "
        f"state when it has been (`longtask status {thread_id}`)"
    )


def _refuse_command_update(input: Any) -> None:
    from langgraph.types import Command

    if isinstance(input, Command) and input.update is not None and not _TRUSTED.get():
        raise InvalidInput(
            "a Command(update=...) given to the task's graph would write its state past the "
            "checks of a state update; set results with Runner.resume(thread, "
            "Command(update={step: result})), `longtask resume THREAD --update JSON` or the "
            "graph's update_state, which check and record them"
        )


def pause_refusal(task: LongTask, step: str, thread_id: str | None = None) -> str:
    """Why no state write may set an approval's or a wait's result (or request)."""
    kind = task.steps[step]
    assert isinstance(kind, PauseStep)
    what = (
        "an approval: its result is a decision"
        if kind.kind == "approval"
        else "a wait: its result is the event it waits for"
    )
    return (
        f"step {step!r} is {what}, which a state update cannot set (that would skip its "
        f"checks and leave no record of who answered); "
        f"{_answer_command(kind.kind, thread_id or 'THREAD', step)}, or a run with "
        'command={"resume": ...}'
    )


def _answer_command(kind: str, thread_id: str, step: str) -> str:
    if kind == "approval":
        return f"decide it with `longtask approve {thread_id} {step} --by NAME` (or reject)"
    return f"deliver it with `longtask signal {thread_id} {step} --payload JSON`"


def _pause_word(kind: str) -> str:
    return "approval" if kind == "approval" else "wait"


def _cfg(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}
