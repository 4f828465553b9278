"""Schedule: start a task on a new thread at the times a cron expression names.

Pure data and the time arithmetic (croniter, zoneinfo); registering schedules in a database
and firing them is the runtime's job (``longtask.ops._schedules``).

A tick is one time the cron expression names, in the schedule's timezone. The thread a tick
starts has an id derived from the schedule's name and the tick's UTC time
(``nightly-20261201T0200Z``), so a tick fired twice (two workers, a retried ``tick``) is
refused by the thread id and never starts a second thread.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from longtask.errors import describe_validation
from longtask.model._canonical import canonical_digest

#: schedule names: part of every fired thread's id, so a small alphabet; ``-`` allowed
SCHEDULE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
#: the tick part of a fired thread's id (``-20261201T0200Z``)
TICK_SUFFIX_RE = re.compile(r"-(\d{8}T\d{4}Z)$")
_CRON_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")

CatchUp = Literal["one", "none"]


class HasInputs(Protocol):
    """What a schedule's checks read of its task (a ``LongTask``): the inputs model, if any.
    A protocol so this module need not import ``_task``, which imports ``Schedule``."""

    @property
    def inputs(self) -> type[BaseModel] | None: ...


class Schedule(BaseModel):
    """Start the task at the times ``cron`` names, in ``timezone``, with ``inputs``.

    ``cron`` has the five fields of crontab (minute hour day-of-month month day-of-week) or
    an alias such as ``@daily``. ``catch_up`` says what a tick missed while nothing could
    fire it (every worker down, no ``longtask tick``) does: ``"one"`` runs the latest
    missed tick once when firing resumes, ``"none"`` skips missed ticks (a tick fires only
    within a few minutes of its time). ``name`` (lowercase letters, digits, ``-`` and
    ``_``) identifies the schedule in the database and in its threads' ids; by default it
    is derived from the task name and a digest of cron, timezone and inputs.

    Problems (a bad cron expression, an unknown timezone, inputs the task refuses) are
    reported with the task's other definition problems.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    cron: str
    inputs: dict[str, Any] = Field(default_factory=dict)
    timezone: str = "UTC"
    catch_up: CatchUp = "one"
    name: str | None = None

    def __init__(self, cron: str | None = None, **kw: Any) -> None:
        if cron is not None:
            kw["cron"] = cron
        super().__init__(**kw)

    # -- checks ------------------------------------------------------------------------------

    def problems(self, task: HasInputs | None = None, *, named: bool = True) -> list[str]:
        """What is wrong with this schedule (of ``task``, whose inputs model it must fit);
        each problem starts with which schedule it is, unless not ``named``."""
        out = cron_problems(self.cron)
        if (p := timezone_problem(self.timezone)) is not None:
            out.append(p)
        if self.name is not None and not SCHEDULE_NAME_RE.match(self.name):
            out.append(
                f"the name {self.name!r} is not allowed: use 1-63 lowercase letters, digits, "
                "'-' and '_', starting with a letter or digit (it becomes part of thread ids)"
            )
        try:
            json.dumps(self.inputs, allow_nan=False)
        except (TypeError, ValueError) as exc:
            out.append(f"inputs must be JSON data (they are stored): {exc}")
        else:
            if task is not None:
                out.extend(inputs_problems(task, self.inputs))
        if not named:
            return out
        where = f"schedule {self.name!r}" if self.name else f"schedule {self.cron!r}"
        return [f"{where}: {p}" for p in out]

    # -- identity ----------------------------------------------------------------------------

    def name_for(self, task_name: str) -> str:
        """This schedule's name: the one given, or one derived from the task's name and a
        digest of what the schedule does (the same in every process)."""
        if self.name is not None:
            return self.name
        slug = re.sub(r"[^a-z0-9_-]+", "-", task_name.lower()).strip("-_")[:45] or "task"
        digest = canonical_digest(
            {"cron": self.cron, "timezone": self.timezone, "inputs": self.inputs},
            "the schedule",
            length=8,
        )
        return f"{slug}-{digest}"

    # -- time --------------------------------------------------------------------------------

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


def cron_problems(cron: str) -> list[str]:
    from croniter import croniter

    if not isinstance(cron, str) or not cron.strip():
        return ["cron must not be empty: give five fields, e.g. '0 3 * * *' (03:00 daily)"]
    text = cron.strip()
    if text.startswith("@"):
        if text.lower() not in _CRON_ALIASES:
            return [f"cron {cron!r} is not a known alias; use one of {', '.join(_CRON_ALIASES)}"]
        return []
    fields = text.split()
    if len(fields) != 5:
        return [
            f"cron {cron!r} has {len(fields)} field{'s' if len(fields) != 1 else ''}; give "
            "five: minute hour day-of-month month day-of-week (e.g. '0 3 * * *')"
        ]
    try:
        it = croniter(text, datetime(2000, 1, 1, tzinfo=UTC))
    except Exception as exc:  # croniter's errors name the bad field
        return [f"cron {cron!r} is not valid: {exc}"]
    try:
        it.get_next(datetime)
    except Exception:
        return [f"cron {cron!r} names no time that exists (a 30 February?)"]
    return []


def timezone_problem(timezone: str) -> str | None:
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        return (
            f"timezone {timezone!r} is unknown; give an IANA name such as 'UTC' or 'Europe/Paris'"
        )
    return None


def inputs_problems(task: HasInputs, inputs: Mapping[str, Any]) -> list[str]:
    """Why ``task`` would refuse ``inputs`` when a tick starts it (the runner's own check,
    made at definition time)."""
    model = task.inputs
    if model is None:
        return []
    out = []
    if model.model_config.get("extra") is None:
        known: set[Any] = set()
        for name, field in model.model_fields.items():
            known.update((name, field.alias, field.validation_alias))
        unknown = [k for k in inputs if k not in known]
        if unknown:
            out.append(
                f"inputs have unknown key{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(map(repr, unknown))}; {model.__name__} takes "
                f"{', '.join(model.model_fields) or 'none'}"
            )
            return out
    try:
        model.model_validate(dict(inputs))
    except ValidationError as exc:
        out.append(f"inputs do not match {model.__name__}: {describe_validation(exc)}")
    return out


# -- ticks ---------------------------------------------------------------------------------


def _iter(cron: str, start: datetime) -> Any:
    from croniter import croniter

    return croniter(cron.strip(), start)


def _wall(t: datetime) -> tuple[int, ...]:
    return (t.year, t.month, t.day, t.hour, t.minute)


def next_tick(cron: str, timezone: str, after: datetime) -> datetime:
    """The first tick strictly after ``after``, in UTC.

    A wall-clock time that happens twice when the clocks go back fires once (the first
    time); a time skipped when they go forward fires at the first minute after the gap.
    """
    zone = ZoneInfo(timezone)
    local = after.astimezone(zone)
    it = _iter(cron, local)
    t: datetime = it.get_next(datetime)
    while t.fold == 1:
        # croniter also names the second pass of a repeated wall-clock time (fold=1);
        # the first pass was the tick.
        t = it.get_next(datetime)
    return t.astimezone(UTC)


def latest_tick(cron: str, timezone: str, now: datetime) -> datetime:
    """The last tick at or before ``now``, in UTC."""
    from croniter import croniter

    zone = ZoneInfo(timezone)
    local = now.astimezone(zone)
    minute = local.replace(second=0, microsecond=0)
    if croniter.match(cron.strip(), minute) and minute <= local:
        found = minute
    else:
        found = _iter(cron, local).get_prev(datetime)
    if found.fold == 1:
        # The second pass of a repeated wall-clock time is not a tick of its own.
        found = found.replace(fold=0)
    return found.astimezone(UTC)


def ticks_between(cron: str, timezone: str, start: datetime, end: datetime) -> Iterator[datetime]:
    """Ticks ``t`` with ``start <= t <= end`` (UTC), first to last."""
    t = next_tick(cron, timezone, start - timedelta(microseconds=1))
    while t <= end:
        yield t
        t = next_tick(cron, timezone, t)


def tick_id(schedule_name: str, tick: datetime) -> str:
    """The id of the thread a tick starts: the schedule's name and the tick's UTC time."""
    return f"{schedule_name}-{tick.astimezone(UTC):%Y%m%dT%H%MZ}"
