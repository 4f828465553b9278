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
    from longtask.serve._access import Access
    from longtask.serve._executor import Executor
    from longtask.serve._registry import Registered, Registry
    from longtask.store._apiruns import ApiRun

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
    prepare: Callable[[str | None, Registered, dict[str, Any], str], ApiRun] | None = None
    #: every check ``prepare`` makes, recording nothing (raises): set by the runs' routes
    check_run: Callable[[str | None, Registered, dict[str, Any], str], None] | None = None
    #: a run's stream parts to its end (run, stream modes or None for the run's own): set
    #: by the runs' routes, used by the thread's stream
    run_parts: Callable[[ApiRun, list[str] | None], AsyncIterator[bytes]] | None = None

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await run_in_threadpool(fn, *args, **kwargs)

    def assistant(self, key: str) -> Registered:
        try:
            return self.registry.get(key)
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from None

    async def json_body(self, request: Request) -> dict[str, Any]:
        data = await read_json_body(request)
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise HTTPException(400, "the body must be a JSON object")
        return data
