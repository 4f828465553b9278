"""The run core: a thread started, advanced and stopped, one LangGraph run at a time."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command
from pydantic import BaseModel

from longtask.errors import (
    Cancelled,
    DefinitionChanged,
    InvalidInput,
    LeaseLost,
    LimitReached,
    NeedsPerson,
    NothingToResume,
    PauseFailed,
    RetryLater,
    StepExited,
    StepFailed,
    Stopping,
    TaskRefError,
    ThreadExists,
    connection_error,
)
from longtask.graphs import compile_graph, entry_node
from longtask.model import GraphApp, LongTask, PauseStep
from longtask.runtime._accepted import record_answers, with_accepted
from longtask.runtime._answers import GATE_ANSWER, NotWaiting, refuse_repeated_outcome
from longtask.runtime._calls import (
    CALL_CONFIG,
    CALL_TAP,
    TAP_MODES,
    StreamSpec,
    check_config,
    merge_config,
    traced,
)
from longtask.runtime._gate import Gate, holding, through
from longtask.runtime._inputs import translate, validate_context, validate_inputs
from longtask.runtime._interrupts import USER_KINDS, interrupted, open_interrupts
from longtask.runtime._queue import DEFAULT_QUEUE, encode_command, make_app, worker_name
from longtask.runtime._reading import _config
from longtask.runtime._recovery import recover
from longtask.runtime._subtasks import Subtasks
from longtask.runtime._taskref import find_ref, load_versions
from longtask.runtime._threadid import check_thread_id
from longtask.runtime._tracking import CancelWatch, StageTracker, concurrency, finishes_step
from longtask.runtime._views import (
    definition_changes,
    definition_summary,
)
from longtask.runtime._who import check_by, whoami
from longtask.steps import (
    CONTEXT_CHANNEL,
    INPUTS_CHANNEL,
    STEP_ATTR,
    PauseOutcome,
    StepEnv,
)
from longtask.steps._attempts import error_type
from longtask.steps._tracing import end_span, start_span
from longtask.store import (
    NewEvent,
    ThreadRecord,
    ValueCodec,
)
from longtask.store._fence import lease_lost
from longtask.store._kinds import GATE_KINDS, SUBTASK_KIND, TURN_STARTED
from longtask.store._limits import settle_statement

if TYPE_CHECKING:
    from longtask.checkpointers import Database
    from longtask.runtime._compensate import Compensator
    from longtask.runtime._gotos import Gotos
    from longtask.runtime._notify import Notifier
    from longtask.runtime._queue import Queue
    from longtask.runtime._reading import Reads
    from longtask.store import EventWriter

log = logging.getLogger("longtask.runtime")

#: called with (thread_id, step names that just finished) while a run advances
UpdateHook = Callable[[str, list[str]], None]


def first_input(rec: ThreadRecord) -> dict[str, Any]:
    """A thread's first input to its graph: its inputs, and its run context if it was
    started with one (both from its record)."""
    out: dict[str, Any] = {INPUTS_CHANNEL: rec.inputs}
    if rec.context is not None:
        out[CONTEXT_CHANNEL] = rec.context
    return out


class Engine:
    """The run core: compiles a task's graph, starts threads and advances them under their
    lock (or a worker's lease), one LangGraph run at a time, keeping the thread's record,
    status and events in step with its checkpoints.

    It reads records through ``reads``, hands worker threads' continuations to ``queue``
    (and takes the lease from it), checks gotos with ``gotos`` and carries out cancels with
    ``compensator``. ``clock`` decides deadlines, ``sleep`` how steps wait between
    attempts, ``stopping`` stops every run at its next step boundary (a worker's shutdown),
    ``cancel_poll`` is how often a run looks for a cancel request, ``on_update`` hears of
    the steps each run finishes, and ``worker`` is set in a worker's runner.
    """

    def __init__(
        self,
        db: Database,
        codec: ValueCodec,
        events: EventWriter,
        *,
        reads: Reads,
        queue: Queue,
        gotos: Gotos,
        compensator: Compensator,
        clock: Callable[[], datetime],
        sleep: Callable[[float], None],
        stopping: threading.Event,
        worker: str | None,
        cancel_poll: float,
        on_update: UpdateHook | None,
        notifier: Notifier | None = None,
    ) -> None:
        self.db = db
        self.codec = codec
        #: events wait here to commit with their thread's next checkpoint (see EventWriter)
        self.events = events
        self._reads = reads
        self._queue = queue
        self._gotos = gotos
        self._compensator = compensator
        self.clock = clock
        self.sleep = sleep
        self.stopping = stopping
        self.worker = worker
        self.cancel_poll = cancel_poll
        self.on_update = on_update
        #: delivers the notices a run's events make, after the run (see runtime._notify)
        self.notifier = notifier
        #: every outside write of a thread's state passes it (see runtime._gate)
        self.gate = Gate(db, codec, events, queue, validate_inputs, whoami)
        #: child threads of sub-task steps (see runtime._subtasks)
        self.subtasks = Subtasks(
            db,
            codec,
            queue,
            reads,
            validate=self.validate_inputs,
            create=self._create_record,
            resume=self.resume,
        )
        self._graphs: dict[
            int, tuple[LongTask, StepEnv, CompiledStateGraph[Any, Any, Any, Any]]
        ] = {}

    # -- graphs ------------------------------------------------------------------------------

    def graph(self, task: LongTask) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The compiled LangGraph graph of ``task``, bound to this runner's checkpointer.
        It is a plain LangGraph graph: ``get_state``, ``get_state_history``,
        ``update_state`` and ``Command`` work on it with ``{"configurable":
        {"thread_id": ...}}``."""
        return self.compiled(task)[1]

    def compiled(self, task: LongTask) -> tuple[StepEnv, CompiledStateGraph[Any, Any, Any, Any]]:
        cached = self._graphs.get(id(task))
        if cached is None or cached[0] is not task:
            env = StepEnv(
                store=self.db.store,
                codec=self.codec,
                events=self.events,
                inputs_model=task.inputs,
                clock=self.clock,
                sleep=self.sleep,
                stopping=self.stopping,
                defer_waits=self.worker is not None,
                default_retry=task.retry,
                has_limits=task.budget is not None or task.deadline is not None,
                counts_time=task.budget is not None and task.budget.wall_time is not None,
                on_limit=task.on_limit,
                pauses=frozenset(n for n, s in task.steps.items() if isinstance(s, PauseStep)),
            )
            compiled = compile_graph(task, env, self.db.saver, self.db.graph_store)
            env.snapshot = compiled.get_state
            env.adopt = lambda thread_id, state: self._adopt(task, thread_id, state)
            env.children = self.subtasks
            self.gate.install(task, compiled)
            cached = (task, env, compiled)
            self._graphs[id(task)] = cached
        return cached[1], cached[2]

    # -- running -----------------------------------------------------------------------------

    def start(
        self,
        task: LongTask,
        inputs: Mapping[str, Any] | BaseModel | None = None,
        thread_id: str | None = None,
        *,
        task_ref: str | None = None,
        config: Mapping[str, Any] | None = None,
        by: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> str:
        """Start ``task`` on a new thread and run it until it completes, pauses or fails.

        Returns the thread id. A failing step raises :class:`StepFailed` (the thread is kept
        and ``resume`` continues it). ``config`` (callbacks, tags, metadata, run_name) goes
        into the run's LangGraph config, so tracers see the run. ``by``: who starts it, the
        thread's owner (default: the OS user). ``context``: the run context its graph steps'
        graphs read as LangGraph's runtime context (a JSON object, kept with the thread, so
        every later run of it has the same: put no secret in it).
        """
        check_config(config)
        thread_id, parts = self.start_run(
            task, inputs, thread_id, task_ref, StreamSpec(), config, by=by, context=context
        )
        for _ in parts:
            pass
        return thread_id

    def start_run(
        self,
        task: LongTask,
        inputs: Mapping[str, Any] | BaseModel | None,
        thread_id: str | None,
        task_ref: str | None,
        spec: StreamSpec,
        config: Mapping[str, Any] | None,
        *,
        by: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> tuple[str, Iterator[Any]]:
        """Create the thread now; its first run happens as the parts are read."""
        rec = self.new_thread(task, inputs, thread_id, task_ref, None, owner=by, context=context)
        parts = self._run(rec, task, first_input(rec), first=True, spec=spec, config=config)
        return rec.thread_id, parts

    def submit(
        self,
        task: LongTask,
        inputs: Mapping[str, Any] | BaseModel | None = None,
        thread_id: str | None = None,
        *,
        task_ref: str | None = None,
        queue: str = DEFAULT_QUEUE,
        by: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> str:
        """Start ``task`` on a new thread served by workers (``longtask worker``): returns
        at once; a worker runs it. The task must be importable by its reference on every
        worker (a module path, or a file path the workers can read). ``by``: who starts
        it, the thread's owner (default: the OS user). ``context``: as for ``start``."""
        make_app(self.db)  # PostgreSQL only: refuse before anything is stored
        rec = self.new_thread(
            task, inputs, thread_id, task_ref, "worker", owner=by, context=context
        )
        if not rec.task_ref:
            raise InvalidInput(
                f"task {task.name!r} has no importable reference, so workers cannot load it; "
                "define it in a module and pass task_ref='package.module:name'"
            )
        self.db.store.append_event(
            rec.thread_id,
            "longtask.started",
            key="longtask.started",
            data={"task": task.name, "version": task.version, "hash": task.definition_hash},
        )
        self._queue.wake(rec.thread_id, queue=queue)
        return rec.thread_id

    def new_thread(
        self,
        task: LongTask,
        inputs: Mapping[str, Any] | BaseModel | None,
        thread_id: str | None,
        task_ref: str | None,
        mode: str | None,
        *,
        owner: str | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> ThreadRecord:
        """A new thread's record; ``owner``: who starts it (default: the OS user)."""
        if thread_id is None:
            thread_id = f"lt-{uuid.uuid4().hex[:12]}"
        check_thread_id(thread_id)
        owner = check_by(owner) if owner is not None else whoami()
        encoded = self.codec.encode(self.validate_inputs(task, inputs), "the task inputs")
        checked = validate_context(task, context)
        return self._create_record(
            task, thread_id, encoded, task_ref, "pending", mode, owner, checked
        )

    def _create_record(
        self,
        task: LongTask,
        thread_id: str,
        encoded_inputs: Any,
        task_ref: str | None,
        status: str,
        mode: str | None,
        owner: str | None,
        context: dict[str, Any] | None = None,
    ) -> ThreadRecord:
        """Store a new thread's record (``ThreadExists`` if the id is taken) and budget."""
        rec = ThreadRecord(
            thread_id=thread_id,
            task_ref=task_ref or find_ref(task),
            task_name=task.name,
            task_version=task.version,
            definition_hash=task.definition_hash,
            definition=definition_summary(task),
            inputs=encoded_inputs,
            status=status,
            mode=mode,
            owner=owner,
            context=context,
        )
        self.db.store.create_thread(rec)
        if task.budget is not None or task.deadline is not None:
            self.db.store.budget_init(
                thread_id,
                task.budget.limits() if task.budget else {},
                self.clock().timestamp() + task.deadline if task.deadline else None,
            )
        return rec

    def _adopt(self, task: LongTask, thread_id: str, state: Mapping[str, Any]) -> None:
        """A thread run through LangGraph directly (``runner.graph(task).invoke(...)``)
        becomes a thread of this task like one ``start`` made: status, events, the CLI and
        ``resume`` see it. A thread of another task is refused before any step runs."""
        rec = self.db.store.get_thread(thread_id)
        if rec is None:
            check_thread_id(thread_id)
            inputs = state.get(INPUTS_CHANNEL)
            with contextlib.suppress(ThreadExists):  # a parallel node adopted it first
                # run through LangGraph directly by this process: its user owns it
                context = state.get(CONTEXT_CHANNEL)
                self._create_record(
                    task, thread_id, inputs, None, "running", None, whoami(), context
                )
            return
        if rec.task_name != task.name:
            raise InvalidInput(
                f"thread {thread_id!r} belongs to task {rec.task_name!r}, not {task.name!r}: "
                "run it with its own task's graph, or use a new thread id"
            )

    def resume(
        self,
        thread_id: str,
        command: Command[Any] | None = None,
        *,
        task: LongTask | None = None,
        allow_changed_definition: bool = False,
        expect_interrupt: str | None = None,
        skip_pending: bool = False,
        by: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> str:
        """Continue a failed, interrupted or paused thread from its last checkpoint.

        Finished steps are not run again. ``command`` is passed to LangGraph as is, except
        that ``update`` keys naming steps (or ``inputs``) are mapped to their channels. A
        ``goto`` past a pending approval or wait is refused unless ``skip_pending`` (recorded
        as a ``manual.goto`` event with ``by``). ``config`` as for ``start`` (a thread served
        by workers runs without it: callbacks cannot be queued).
        """
        check_config(config)
        parts = self.resume_run(
            thread_id,
            command,
            task=task,
            allow_changed_definition=allow_changed_definition,
            expect_interrupt=expect_interrupt,
            skip_pending=skip_pending,
            by=by,
            spec=StreamSpec(),
            config=config,
        )
        for _ in parts:
            pass
        return thread_id

    def resume_run(
        self,
        thread_id: str,
        command: Command[Any] | None,
        *,
        task: LongTask | None,
        allow_changed_definition: bool,
        expect_interrupt: str | None = None,
        skip_pending: bool = False,
        by: str | None = None,
        spec: StreamSpec,
        config: Mapping[str, Any] | None,
        seen: str | None = None,
    ) -> Iterator[Any]:
        """Check and translate now; the run happens as the parts are read (none for a
        thread served by workers: its run is queued, only if its state is still the one
        checked: ``seen``, the queue's mark taken before the caller's own checks, else
        one taken here)."""
        rec = self._reads.thread(thread_id)
        if seen is None and command is not None:
            # Before every read of its state the checks below make (a command only: a
            # plain continuation depends on no state).
            seen = self._queue.mark(rec)
        task = task or self.load(rec)
        update = command.update if command is not None else None
        if update is not None and command is not None and command.resume is not None:
            raise InvalidInput(
                "answer a pause and set step results in two commands: first "
                "Command(update=...) (`resume --update`), then the answer (`--resume`), since "
                "an update that restarts a pause makes it ask again"
            )
        graph_input: Any = self._translate(task, command) if command is not None else None
        if isinstance(graph_input, Command) and graph_input.resume is None and not graph_input.goto:
            graph_input = None  # an update alone: the run goes on from the checkpoint it makes
        raw: Any = command.goto if command is not None else ()
        goto = [g for g in ([raw] if isinstance(raw, str) else raw or ()) if isinstance(g, str)]
        graph = self.graph(task)

        def write_update() -> None:
            # The gate writes the update as a checkpoint of its own (so updates compose);
            # the run then goes on from it.
            with holding(thread_id), through("command", by):
                graph.update_state(_config(thread_id), update)

        if self._queue.served_by_workers(rec):
            if update is not None:
                # Refused here, where the caller sees it; the worker's run writes it.
                self.gate.check(task, graph, thread_id, update, door="command")
            if rec.status in ("completed", "cancelled") and command is None:
                raise NothingToResume(thread_id, rec.status)
            # Refused here, where the caller sees it; the worker checks again (and records).
            if rec.status == "failed":
                refuse_repeated_outcome(rec)
            self._gotos.check(rec, task, goto, skip_pending=skip_pending, by=by, record=False)
            self._queue.enqueue(
                thread_id,
                {
                    "kind": "resume",
                    "command": encode_command(command),
                    "allow_changed_definition": allow_changed_definition,
                    "expect_interrupt": expect_interrupt,
                    "skip_pending": skip_pending,
                    "by": by,
                },
                seen=seen,
            )
            return iter(())

        def check(current: ThreadRecord) -> None:
            # Runs under the thread's lock, on a fresh read: another process may have
            # finished the thread while this one was loading the task.
            if current.status == "cancelled":
                raise NothingToResume(thread_id, current.status)
            if (current.error or {}).get("compensated"):
                # Its completed steps were undone: going forward would build on nothing.
                raise NothingToResume(thread_id, "failed and compensated")
            if (
                command is None
                and current.status in ("completed", "cancelled")
                # update_state on the graph may have scheduled more work since
                and not self.graph(task).get_state(_config(thread_id)).next
            ):
                raise NothingToResume(thread_id, current.status)
            if expect_interrupt is not None:
                if current.status in ("failed", "completed", "cancelled", "cancelling"):
                    # Decided under the lock from the stored state: LangGraph keeps the
                    # interrupt of a pause that failed the thread (a passed deadline), and a
                    # late answer to it must not revive the thread.
                    raise NotWaiting(
                        f"thread {thread_id!r} is {current.status}: it no longer waits for an "
                        f"answer; see `longtask status {thread_id}`"
                    )
                head = self.db.saver.head(thread_id)
                if expect_interrupt not in {p.interrupt_id for p in open_interrupts(head)}:
                    raise NotWaiting(
                        f"thread {thread_id!r} is no longer waiting for that answer (another "
                        "process answered it); see `longtask pending`"
                    )
            if current.status == "failed":
                refuse_repeated_outcome(current)
            if task.definition_hash != current.definition_hash:
                new = definition_summary(task)
                if not allow_changed_definition:
                    raise DefinitionChanged(
                        thread_id,
                        current.definition_hash,
                        task.definition_hash,
                        definition_changes(current.definition, new),
                        to_version=task.version,
                    )
                self.db.store.update_definition(thread_id, task.definition_hash, new)
                # Rides with the run's first checkpoint (or its end's flush): the record of
                # an unchecked change commits with the work done on the new definition.
                self.events.put(
                    NewEvent(
                        thread_id,
                        "definition.forced",
                        key=f"definition.forced/{uuid.uuid4().hex}",
                        data={
                            "from_hash": current.definition_hash,
                            "to_hash": task.definition_hash,
                            "from_version": current.definition.get("version"),
                            "to_version": task.version,
                            "changes": definition_changes(current.definition, new),
                            "by": by,
                        },
                    )
                )
            self._gotos.check(current, task, goto, skip_pending=skip_pending, by=by, record=True)
            if update is not None:
                # Checked under the lock, before the lease is taken: a refusal changes nothing.
                self.gate.check(task, graph, thread_id, update, door="command", held=True)
            # Accepted: an answer to a graph's interrupt is durable from here on.
            record_answers(self.db, thread_id, command, by)

        if graph_input is None:
            graph_input = self._answer_gates(rec, task)
        return self._run(
            rec,
            task,
            graph_input,
            first=False,
            check=check,
            spec=spec,
            config=config,
            before=write_update if update is not None else None,
        )

    def _answer_gates(self, rec: ThreadRecord, task: LongTask) -> Command[Any] | None:
        """A plain resume of a thread paused at gates (a budget reached, a permission
        missing) or at its sub-tasks answers their interrupts, so the steps look again:
        without an answer LangGraph would only ask the same again. A stale id (answered
        meanwhile) is ignored by LangGraph."""
        if rec.status in ("completed", "cancelled"):
            return None
        gates = [
            p
            for p in open_interrupts(self.db.saver.head(rec.thread_id))
            if p.kind in GATE_KINDS or p.kind == SUBTASK_KIND
        ]
        if not gates:
            return None
        return Command(resume={p.interrupt_id: dict(GATE_ANSWER) for p in gates})

    def validate_inputs(self, task: LongTask, inputs: Mapping[str, Any] | BaseModel | None) -> Any:
        """``inputs`` checked against the task's inputs model, as plain JSON (InvalidInput
        naming every problem, and any key the model does not know)."""
        return validate_inputs(task, inputs)

    def _translate(self, task: LongTask, command: Command[Any]) -> Command[Any]:
        return translate(task, command)

    def load(self, rec: ThreadRecord) -> LongTask:
        if not rec.task_ref:
            raise TaskRefError(
                f"thread {rec.thread_id!r} has no task reference (it was started from an "
                "object that could not be located); pass task=... to resume it"
            )
        family = load_versions(rec.task_ref)
        # The definition the thread started on, when the code still has it; else the newest
        # (and the definition check refuses it unless told otherwise).
        return family.by_hash(rec.definition_hash) or family.newest

    def advance(
        self,
        rec: ThreadRecord,
        task: LongTask,
        graph_input: Any,
        *,
        first: bool,
        check: Callable[[ThreadRecord], None] | None = None,
    ) -> None:
        for _ in self._run(rec, task, graph_input, first=first, check=check):
            pass

    def _run(
        self,
        rec: ThreadRecord,
        task: LongTask,
        graph_input: Any,
        *,
        first: bool,
        check: Callable[[ThreadRecord], None] | None = None,
        spec: StreamSpec | None = None,
        config: Mapping[str, Any] | None = None,
        before: Callable[[], None] | None = None,
    ) -> Iterator[Any]:
        """``_held_run``, then what the run leaves to do once the thread is let go: the
        sub-tasks its steps started here, and the parent of a sub-task that ended."""
        thread_id = rec.thread_id
        self.subtasks.running(thread_id, task)
        try:
            yield from self._held_run(
                rec,
                task,
                graph_input,
                first=first,
                check=check,
                spec=spec,
                config=config,
                before=before,
            )
        except (GeneratorExit, KeyboardInterrupt):
            raise
        except BaseException:
            # The run's own error is what the caller must see; a parent continued here
            # records its own outcome in its thread.
            with contextlib.suppress(Exception):
                self.subtasks.after_run(thread_id, failed=True)
            raise
        self.subtasks.after_run(thread_id, failed=False)

    def _held_run(
        self,
        rec: ThreadRecord,
        task: LongTask,
        graph_input: Any,
        *,
        first: bool,
        check: Callable[[ThreadRecord], None] | None = None,
        spec: StreamSpec | None = None,
        config: Mapping[str, Any] | None = None,
        before: Callable[[], None] | None = None,
    ) -> Iterator[Any]:
        """One run of the thread, under its lock (or lease); yields the stream parts
        ``spec`` asks for (none for start and resume, which read it to the end). ``before``
        runs first, holding the thread (a command's state update)."""
        spec = spec or StreamSpec()
        extra = config if config is not None else CALL_CONFIG.get()
        store = self.db.store
        thread_id = rec.thread_id
        env, graph = self.compiled(task)
        with self._held(thread_id, check, first) as checked:
            rec = checked or rec
            cancel = store.cancel_request(thread_id)
            if cancel is not None:
                # Cancelled (or failed with compensation) before: finish undoing, never
                # advance.
                run = store.set_status(thread_id, "cancelling", new_run=True)
                try:
                    self._compensator.run(self.compiled(task)[0], task, thread_id, run, cancel)
                finally:
                    self._flush_events(thread_id, propagating=sys.exc_info()[1] is not None)
                return
            if before is not None:
                before()
                rec = self._reads.thread(thread_id)
            run = store.set_status(thread_id, "running", new_run=True)
            # Before any event of the run: its pauses and its end make notices only if
            # this records that someone is to be told.
            notifying = self.notifier is not None and self.notifier.thread_runs(thread_id, task)
            # A sub-task's steps check its ancestors' budgets and deadlines too.
            env.set_ancestors(thread_id, tuple(store.ancestors(thread_id)))
            if not first and rec.status == "running":
                # Running, yet this process got the lock: the run that held it died.
                recover(store, env, thread_id, run)
            if not first:
                # answers the dead run had accepted, which its graph had not stored yet
                graph_input = with_accepted(self.db, thread_id, graph_input)
            run_config = merge_config(_config(thread_id, run), extra)
            run_config["max_concurrency"] = concurrency(task)
            if first:
                self.events.put(
                    NewEvent(
                        thread_id,
                        "longtask.started",
                        "longtask.started",
                        data={
                            "task": task.name,
                            "version": task.version,
                            "hash": task.definition_hash,
                        },
                    )
                )
            elif graph_input is None and self.db.saver.head(thread_id) is None:
                # The first run died before LangGraph stored its input checkpoint.
                graph_input = first_input(rec)
            # The run's span is the root of its trace: its steps' spans are its children.
            root = start_span("longtask.run", thread_id=thread_id, run=run, task=task.name)
            try:
                with CancelWatch(self.db, env, thread_id, self.cancel_poll):
                    yield from self._stream(
                        env, graph, task, thread_id, graph_input, run_config, run, spec, root
                    )
            except BaseException as exc:
                end_span(root, exc)
                raise
            else:
                end_span(root, None)
            finally:
                env.forget(thread_id)
                self._flush_events(thread_id, propagating=sys.exc_info()[1] is not None)
                if notifying and self.notifier is not None:
                    self.notifier.wake()  # committed: deliver from the background

    @contextlib.contextmanager
    def _held(
        self, thread_id: str, check: Callable[[ThreadRecord], None] | None, first: bool
    ) -> Iterator[ThreadRecord | None]:
        """The thread held for one run, with its record read afresh under the hold (None for
        a first run) after ``check`` accepted it.

        Every advance takes a new lease epoch, which each checkpoint transaction checks: a
        process whose lock was lost (its connection closed) cannot write after another has
        taken the thread. A single process checks under its lock before it takes the epoch,
        so a refused command leaves the thread's rows as they were, lease included. A worker
        is held by its lease alone, so it takes the epoch first."""
        if self.worker:
            with self._queue.lease(thread_id):
                yield self._checked(thread_id, check, first)
            return
        with self.db.lock(thread_id):
            rec = self._checked(thread_id, check, first)
            with self._queue.lease(thread_id, f"process:{worker_name()}"):
                yield rec

    def _checked(
        self, thread_id: str, check: Callable[[ThreadRecord], None] | None, first: bool
    ) -> ThreadRecord | None:
        if first and check is None:
            return None  # just created by this process
        rec = self._reads.thread(thread_id)
        if check is not None:
            check(rec)
        return rec

    def _flush_events(self, thread_id: str, *, propagating: bool) -> None:
        try:
            # writes of the run's last steps still held for a checkpoint (see
            # checkpointers._held), then the events no checkpoint carried
            self.db.saver.release(thread_id)
            self.events.flush(thread_id)
        except Exception as exc:
            if lease_lost(exc):
                # Refused with the run's writes: drop them, or this process would store
                # them with a later run of the thread.
                self.events.take(thread_id)
                if propagating:
                    return
                raise LeaseLost(thread_id) from exc
            if not propagating:
                raise
            # The run's own error matters more than a lost event write; keep it visible.
            log.exception("could not store events while a run was failing")

    def _stream(
        self,
        env: StepEnv,
        graph: CompiledStateGraph[Any, Any, Any, Any],
        task: LongTask,
        thread_id: str,
        graph_input: Any,
        config: RunnableConfig,
        run: int,
        spec: StreamSpec,
        root: Any,
    ) -> Iterator[Any]:
        store = self.db.store
        events = self.events
        done = self._reads.done_steps(thread_id)
        stages = StageTracker(task, done)
        started: list[str] = []  # steps this run started by hand (see below)
        tapped = CALL_TAP.get()
        tap = tapped[0] if tapped is not None else None
        # a tap that keeps parts stores them before the run's status is recorded
        flush = getattr(tap, "flush", None)
        modes = spec.graph_modes()
        if tapped is not None:
            modes = sorted({*modes, *TAP_MODES, *tapped[1]})  # type: ignore[arg-type]
        subgraphs = spec.subgraphs or tap is not None
        while True:
            try:
                parts = graph.stream(
                    graph_input,
                    config,
                    durability="sync",
                    stream_mode=modes,
                    subgraphs=subgraphs,
                )
                try:
                    for part in traced(parts, root):
                        ns, mode, chunk = part if subgraphs else ((), *part)
                        if tap is not None:
                            tap(ns, mode, chunk)
                            if ns and not spec.subgraphs:
                                continue  # asked for by the tap only
                        if mode == "updates" and not ns:
                            finished = [n for n, u in chunk.items() if finishes_step(task, n, u)]
                            done.update(finished)
                            for event in stages.finish(thread_id, finished):
                                events.put(event)
                            if finished and self.on_update:
                                self.on_update(thread_id, finished)
                        if mode in spec.modes:
                            yield spec.part(ns, mode, chunk)
                finally:
                    if flush is not None:
                        flush()
            except Exception as exc:
                self._stopped(task, thread_id, run, exc)
                return
            except (KeyboardInterrupt, GeneratorExit):
                # GeneratorExit: the caller stopped reading a stream; the run stops there.
                # Ctrl-C: the thread stays running with no process advancing it, which
                # `longtask resume` continues (as after a crash); the CLI says so.
                raise
            except BaseException as exc:
                # sys.exit() (or another non-Exception) outside a step's own call, such as
                # in a tool or a compensation: the thread fails rather than stay running.
                self._stopped(task, thread_id, run, StepExited(exc, "the run"))
                return
            # Read from the head's pending writes, not LangGraph's get_state (which rebuilds
            # every channel: a third of a one-step resume on a 2,000-step thread). A run
            # that returns without an error stopped at an interrupt or at the end.
            head = self.db.saver.head(thread_id)
            if interrupted(head):
                waiting = [p.summary() for p in open_interrupts(head)]
                status = (
                    "waiting_user"
                    if any(w["kind"] in USER_KINDS for w in waiting) or not waiting
                    else "waiting_external"
                )
                if not self.db.saver.settle(
                    thread_id, *settle_statement(thread_id, status, waiting)
                ):
                    self._cancel_won(task, thread_id, run)
                return
            # Steps added by a definition change never got their trigger in the old
            # graph: start those whose dependencies are done.
            done = self._reads.done_steps(thread_id)
            ready = [
                name
                for name, info in task.layout.items()
                if name not in done and all(d in done for d in info.depends_on)
            ]
            if not ready or ready == started:
                break  # nothing to start, or starting them did not finish them
            started = ready
            graph_input = Command(goto=[entry_node(task, name) for name in ready])
        missing = [name for name in task.steps if name not in done]
        if missing:
            error = {
                "step": missing[0],
                "type": "NotRun",
                "message": f"steps never ran: {', '.join(missing)}",
            }
            store.set_status(thread_id, "failed", error=error)
            raise StepFailed(thread_id, missing[0], error["message"])
        # Decided in one statement against a cancel stored meanwhile (its request is
        # refused once the thread is completed): a cancel that came while the last step ran
        # wins and is carried out here; otherwise the thread completes and the cancel is
        # answered "too late".
        completed = NewEvent(thread_id, "longtask.completed", self._completed_key(task, thread_id))
        if not self.db.saver.settle(
            thread_id, *settle_statement(thread_id, "completed"), completed
        ):
            self._cancel_won(task, thread_id, run)

    def _completed_key(self, task: LongTask, thread_id: str) -> str:
        """A thread completes once, but for a served graph's, which completes each run of
        its graph (``Runner.run_again``): each end is an event of its own."""
        if not isinstance(task, GraphApp):
            return "longtask.completed"
        # a fork's run (``longtask fork``, then resume) ends once more too
        turns = len(self.db.store.events(thread_id, kinds=[TURN_STARTED, "manual.fork"]))
        return f"longtask.completed/{turns}" if turns else "longtask.completed"

    def _cancel_won(self, task: LongTask, thread_id: str, run: int) -> None:
        request = self.db.store.cancel_request(thread_id) or {"reason": "cancelled"}
        self._compensator.run(self.compiled(task)[0], task, thread_id, run, request)

    def _stopped(self, task: LongTask, thread_id: str, run: int, exc: Exception) -> None:
        """A run ended with ``exc``: cancelled (compensate), paused for a person (record what
        for), or failed (record it, compensate if the task says so, and raise)."""
        store = self.db.store
        if lease_lost(exc):
            # Another worker holds the thread now: touch nothing, let it go.
            raise LeaseLost(thread_id) from exc
        if connection_error(exc) is not None:
            # Nothing can be recorded: the thread stays as its last commit left it (running,
            # to be resumed), and the caller says what happened.
            raise exc
        if isinstance(exc, Stopping):
            store.set_status(thread_id, "pending")
            self._queue.wake(thread_id)  # another worker (or this one, restarted) continues
            return
        if isinstance(exc, RetryLater):
            step = getattr(exc, STEP_ATTR, None)
            waiting = [{"step": step, "kind": "retry", "at": exc.at, "reason": "retrying later"}]
            store.set_status(thread_id, "pending", waiting=waiting)
            return
        if isinstance(exc, Cancelled):
            request = store.cancel_request(thread_id) or {"reason": "cancelled"}
            self._compensator.run(self.compiled(task)[0], task, thread_id, run, request)
            return
        if isinstance(exc, NeedsPerson):
            step = getattr(exc, STEP_ATTR, None)
            waiting = [
                {"step": step, "kind": exc.kind, "reason": exc.reason, "command": exc.command}
            ]
            self._flush_events(thread_id, propagating=False)
            store.set_status(thread_id, "waiting_user", waiting=waiting)
            return
        step = getattr(exc, STEP_ATTR, None)
        error = {"step": step, "type": error_type(exc), "message": str(exc)[:4000]}
        if isinstance(exc, PauseOutcome):
            # Said to people as what happened ("rejected", "timed out"); `retry` asks again.
            error["type"] = error["outcome"] = exc.outcome
        if hasattr(exc, "__longtask_item__"):
            error["item"] = exc.__longtask_item__
        error_class = getattr(exc, "__longtask_error_class__", None)
        if error_class:
            error["error_class"] = error_class
        self.events.put(
            NewEvent(thread_id, "longtask.failed", f"{run}/longtask.failed", data=error)
        )
        self._flush_events(thread_id, propagating=False)
        store.set_status(thread_id, "failed", error=error)
        if step is None and not isinstance(exc, LimitReached):
            raise exc
        if task.compensate_on_failure:
            request = {"reason": f"step {step!r} failed", "by": "longtask", "failure": error}
            store.request_cancel(thread_id, request)
            self._compensator.run(
                self.compiled(task)[0],
                task,
                thread_id,
                run,
                store.cancel_request(thread_id) or request,
            )
        if isinstance(exc, PauseOutcome) and step is not None and not task.compensate_on_failure:
            raise PauseFailed(thread_id, step, str(exc)) from exc
        where = f" (item {error['item']})" if "item" in error else ""
        if isinstance(exc, PauseOutcome):  # a decision, not a fault: no class name to show
            raise StepFailed(thread_id, step or "?", str(exc), rejected=True) from exc
        raise StepFailed(
            thread_id, step or "?", f"{error['type']}: {error['message']}{where}"
        ) from exc
