"""What the Runner's parts (pauses, control, history, watching, the queue) need of it: one
declaration of the Runner's state and of the methods one part calls on another."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langgraph.types import Command
    from pydantic import BaseModel

    from longtask.checkpointers import Database
    from longtask.model import LongTask
    from longtask.runtime._views import Pending
    from longtask.steps import StepEnv
    from longtask.store import EventWriter, ThreadRecord, ValueCodec


class RunnerBase(ABC):
    db: Database
    codec: ValueCodec
    events_writer: EventWriter
    clock: Callable[[], datetime]
    #: set when this runner is a worker's (see QueueMixin)
    worker: str | None

    @abstractmethod
    def _thread(self, thread_id: str) -> ThreadRecord: ...

    @abstractmethod
    def _load(self, rec: ThreadRecord) -> LongTask: ...

    @abstractmethod
    def graph(self, task: LongTask) -> Any: ...

    @abstractmethod
    def _compiled(self, task: LongTask) -> tuple[StepEnv, Any]: ...

    @abstractmethod
    def _done_steps(self, thread_id: str) -> set[str]: ...

    @abstractmethod
    def pending(self, thread_id: str, *, task: LongTask | None = None) -> list[Pending]: ...

    @abstractmethod
    def _validate_inputs(
        self, task: LongTask, inputs: Mapping[str, Any] | BaseModel | None
    ) -> Any: ...

    @abstractmethod
    def _new_thread(
        self,
        task: LongTask,
        inputs: Mapping[str, Any] | BaseModel | None,
        thread_id: str | None,
        task_ref: str | None,
        mode: str | None,
    ) -> ThreadRecord: ...

    @abstractmethod
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
    ) -> str: ...

    @abstractmethod
    def _advance(
        self,
        rec: ThreadRecord,
        task: LongTask,
        graph_input: Any,
        *,
        first: bool,
        check: Callable[[ThreadRecord], None] | None = None,
    ) -> None: ...

    @abstractmethod
    def served_by_workers(self, rec: ThreadRecord) -> bool: ...

    @abstractmethod
    def enqueue(self, thread_id: str, command: dict[str, Any]) -> None: ...
