"""Operations on threads that are finished or idle, standing on the run core: reports and
charts (:class:`Reports`), moving a thread between databases (:class:`Moves`: export,
import, renaming), copying one in its database (:class:`Copies`), deleting ended threads
(:class:`Retention`: prune, delete), schedules (:class:`Scheduler`), and deploying a new
version of a task (:class:`Migrations`, the version report ``_deployed``).

Each is built with what it needs (a database, a clock, and the run core's parts it uses)
and is offered by the Runner (``longtask.Runner``) as its own methods. It may import the run
core (``longtask.runtime``) and everything below it; never the Runner façade, serve, demo or
cli.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from longtask._lazy import lazy_names

if TYPE_CHECKING:
    from longtask.ops._copy import Copies
    from longtask.ops._migrate import Migrations
    from longtask.ops._migrate_plan import MigrationPlan
    from longtask.ops._move import Moves, MoveSummary
    from longtask.ops._plots import draw_graph
    from longtask.ops._prune import PruneReport, PruneSchedule, Retention
    from longtask.ops._reports import Reports
    from longtask.ops._schedules import Fired, Scheduler

_LAZY = {
    "Copies": "longtask.ops._copy",
    "Fired": "longtask.ops._schedules",
    "MigrationPlan": "longtask.ops._migrate_plan",
    "Migrations": "longtask.ops._migrate",
    "MoveSummary": "longtask.ops._move",
    "Moves": "longtask.ops._move",
    "PruneReport": "longtask.ops._prune",
    "PruneSchedule": "longtask.ops._prune",
    "Reports": "longtask.ops._reports",
    "Retention": "longtask.ops._prune",
    "Scheduler": "longtask.ops._schedules",
    "draw_graph": "longtask.ops._plots",
}


__getattr__ = lazy_names("longtask.ops", _LAZY)


__all__ = [
    "Copies",
    "Fired",
    "MigrationPlan",
    "Migrations",
    "MoveSummary",
    "Moves",
    "PruneReport",
    "PruneSchedule",
    "Reports",
    "Retention",
    "Scheduler",
    "draw_graph",
]
