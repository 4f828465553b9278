"""What the LangGraph Server API's routes share: the runner, the registered tasks, the
executor, the token guards and JSON bodies."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from longtask.serve._json_body import read_json_body

if TYPE_CHECKING:
    from longtask._runner import Runner
    from longtask.serve._executor import Executor
    from longtask.serve._registry import Registered, Registry
    from longtask.serve.access import Access
    from longtask.store._apiruns import ApiRun
    from longtask.store._assistants import AssistantRow

T = TypeVar("T")
Handler = Callable[[Request], Awaitable[Response]]
ActorHandler = Callable[[Request, str], Awaitable[Response]]


@dataclass
class Api:
    runner: Runner
    registry: Registry
    executor: Executor
    reader: Callable[[Handler], Handler]
    actor: Callable[[ActorHandler], Handler]
    #: who may see what: lists and searches show only the threads the caller may see
    access: Access
    #: checks and records a run request (thread id or None, assistant, body, actor): set
    #: by the runs' routes, used by other doors that start runs (MCP)
    #: (``assistant=``: the created assistant the run is of, whose configuration it applies)
    prepare: Callable[..., ApiRun] | None = None
    #: every check ``prepare`` makes, recording nothing (raises): set by the runs' routes
    check_run: Callable[..., None] | None = None
    #: a run's stream parts to its end (run, stream modes or None for the run's own): set
    #: by the runs' routes, used by the thread's stream
    run_parts: Callable[..., AsyncIterator[bytes]] | None = None
    #: langgraph.json's ``http.disable_webhooks``: a run's webhook is checked, then never
    #: called (as on LangGraph's server)
    webhooks_off: bool = False
    #: cancels a thread as ``POST /api/threads/{id}/cancel`` does (thread, reason, who):
    #: records the cancel for serve's executor or the workers, returns its run id (or None)
    cancel: Callable[[str, str | None, str], str | None] | None = None

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await run_in_threadpool(fn, *args, **kwargs)

    def assistant(self, key: str) -> Registered:
        try:
            return self.registry.get(key)
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from None

    def resolve(self, key: str) -> tuple[Registered, AssistantRow | None]:
        """The task an assistant id (or graph id) names, and the created assistant when it
        names one (None for a registered task's own); 404 if it names neither, or a
        created assistant of a task this server does not serve."""
        found = self.registry.find(key)
        if found is not None:
            return found, None
        row = self.runner.db.store.assistant_get(key) if _uuid_like(key) else None
        entry = self.registry.find(row.graph_id) if row is not None else None
        if row is None or entry is None:
            self.assistant(key)  # raises the 404 naming the registered tasks
            raise AssertionError("unreachable")
        return entry, row

    async def json_body(self, request: Request) -> dict[str, Any]:
        data = await read_json_body(request)
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise HTTPException(400, "the body must be a JSON object")
        return data


def _uuid_like(key: str) -> bool:
    import uuid

    try:
        uuid.UUID(key)
    except ValueError:
        return False
    return True
