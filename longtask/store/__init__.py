"""longtask's own tables beside the checkpoints (threads, events, blobs, artifacts, effects,
attempts, budgets, leases, schedules) over SQLite or PostgreSQL, the codec that keeps values
in state channels and the writer that queues events. Beside ``model``, on the floor above
``errors``: it imports only ``longtask.errors`` and third-party libraries (psycopg, pydantic;
LangGraph's run config lazily, in ``_values``), never another longtask room.
"""

from longtask.store._artifacts import Artifact
from longtask.store._effects import EFFECT_STATUSES, Effect
from longtask.store._events import NewEvent
from longtask.store._leases import WorkerRecord
from longtask.store._limits import (
    BUDGET_LIMITS,
    NO_ITEM,
    Attempts,
    BudgetState,
    attempt_statement,
)
from longtask.store._maps import MapProgress
from longtask.store._schedules import ScheduleRecord
from longtask.store._schema import SCHEMA_VERSION
from longtask.store._store import (
    FINAL_STATUSES,
    NO_CHECKPOINT,
    STANDS_ON,
    THREAD_STATUSES,
    CheckpointMark,
    Event,
    PostgresStore,
    SqliteStore,
    Store,
    ThreadRecord,
    is_live,
)
from longtask.store._usage import THREAD_SORTS
from longtask.store._values import (
    DEFAULT_INLINE_LIMIT,
    SKIP_MARK,
    ValueCodec,
    is_skipped,
    sending_ahead,
    skipped_value,
)
from longtask.store._writer import EventWriter

__all__ = [
    "BUDGET_LIMITS",
    "DEFAULT_INLINE_LIMIT",
    "EFFECT_STATUSES",
    "FINAL_STATUSES",
    "NO_CHECKPOINT",
    "NO_ITEM",
    "SCHEMA_VERSION",
    "SKIP_MARK",
    "STANDS_ON",
    "THREAD_SORTS",
    "THREAD_STATUSES",
    "Artifact",
    "Attempts",
    "BudgetState",
    "CheckpointMark",
    "Effect",
    "Event",
    "EventWriter",
    "MapProgress",
    "NewEvent",
    "PostgresStore",
    "ScheduleRecord",
    "SqliteStore",
    "Store",
    "ThreadRecord",
    "ValueCodec",
    "WorkerRecord",
    "attempt_statement",
    "is_live",
    "is_skipped",
    "sending_ahead",
    "skipped_value",
]
