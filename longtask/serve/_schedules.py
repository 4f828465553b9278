"""Schedules in ``longtask serve``: it registers the schedules its tasks declare, fires due
ticks in a loop of its own (crons of the Server API too: their ticks record runs, which
its executor carries out), and lists schedules on ``/api/schedules``.

Firing only records the tick's thread; the thread runs in serve's executor (or, with
``--workers``, on ``longtask worker``), never inside a request or the firing loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from longtask.errors import LongTaskError

if TYPE_CHECKING:
    from longtask._runner import Runner
    from longtask.serve._executor import Executor
    from longtask.serve._registry import Registry

log = logging.getLogger("longtask.serve")


class ScheduleLoop:
    """A daemon thread that fires due schedules every ``poll`` seconds."""

    def __init__(
        self, executor: Executor, registry: Registry, *, poll: float = 5.0, to_workers: bool
    ) -> None:
        self.executor = executor
        self.registry = registry
        self.poll = poll
        self.to_workers = to_workers
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="longtask-schedules", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def register(self) -> None:
        """Bring the schedules the served tasks declare into the database."""
        from longtask.ops._schedules import stable_ref

        runner = self.executor.runner
        for entry in self.registry.by_name.values():
            if not entry.task.schedules:
                continue
            try:
                changes = runner.register_schedules(entry.task, task_ref=stable_ref(entry.ref))
            except LongTaskError as exc:
                log.warning("schedules of task %s not registered: %s", entry.name, exc)
                continue
            for name, change in changes:
                if change != "unchanged":
                    log.info("schedule %s %s", name, change)

    def fire(self) -> None:
        runner = self.executor.runner
        runner.fire_due(
            launch="queue" if self.to_workers else self.executor.start_fired,
            submit_run=self.executor.submit,
        )
        # Runs of crons another process fired (a worker, ``longtask tick``, another serve
        # whose executor stopped): carried out here; the claim lets one executor take each.
        self.executor.adopt_cron_runs()

    def _loop(self) -> None:
        self.register()
        while not self._stop.is_set():
            try:
                self.fire()
            except Exception:  # the next round tries again; a tick stays due until fired
                log.exception("could not fire due schedules")
            self._stop.wait(self.poll)


def schedules_route(runner: Runner) -> Callable[[Request], Awaitable[Response]]:
    """``GET /api/schedules``: every schedule the caller may see (those they added; all of
    them for the roles that see everything), with its next fire time."""
    from starlette.concurrency import run_in_threadpool

    from longtask.serve.access import caller_of

    async def schedules(request: Request) -> Response:
        caller = caller_of(request)
        rows = await run_in_threadpool(runner.schedules)
        shown = [r for r in rows if caller.sees_everything or r.owner == caller.name]
        return JSONResponse([r.to_json() for r in shown])

    return schedules
