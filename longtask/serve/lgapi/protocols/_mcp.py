"""``/mcp``: the Model Context Protocol, as LangGraph's server offers its assistants to MCP
clients (coding agents, desktop assistants), built on the official ``mcp`` SDK (Streamable
HTTP, stateless, JSON answers).

Each served task is a tool whose input schema is the task's inputs (named as LangGraph's
server names an assistant's tool). Calling it starts a thread: the run is recorded and the
executor carries it out, as for any run of the Server API; the call answers where the
thread stands once the run has ended or ``wait`` seconds have passed (a long task answers
``running`` with its thread id). Three more tools follow a thread: ``longtask_status``
(status, results so far, the pauses it waits for and how to answer them),
``longtask_answer`` (answers a pause through the same checks as every other door, in the
token's name) and ``longtask_threads`` (recent threads). Errors a person can fix are tool
results with ``isError`` and the message, as LangGraph's server answers them.

Who may do what is serve's one authorization layer (``serve.access``): ``/mcp`` is open to
any caller who is signed in, and each tool asks the same ``Access`` what the route it
stands for would: starting a task is acting (not for viewers), a thread's status needs
seeing it (a thread the caller may not see is "no thread", as a 404), answering needs
answering it, and the list shows only the threads the caller sees.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from longtask._version import __version__
from longtask.errors import LongTaskError
from longtask.serve.access import Answering, Caller, ListScope, caller_of
from longtask.serve.lgapi._commands import plan_answer
from longtask.serve.lgapi._json import plain

if TYPE_CHECKING:
    from longtask.serve._registry import Registered
    from longtask.serve.lgapi._common import Api
    from longtask.store._apiruns import ApiRun
    from longtask.store._assistants import AssistantRow

#: what a tool call waits for its run by default, and at most (an MCP client times out)
WAIT = 10.0
MAX_WAIT = 60.0
#: where the caller (from serve's authorization layer) rides in the ASGI scope to the tools
CALLER_KEY = "longtask_caller"
_BAD_NAME = re.compile(r"[^a-zA-Z0-9_\-.]")
_FINAL = frozenset({"success", "error", "interrupted", "timeout"})

STATUS_TOOL = "longtask_status"
ANSWER_TOOL = "longtask_answer"
THREADS_TOOL = "longtask_threads"


def tool_name(name: str) -> str:
    """A task's tool name: letters, digits, ``_-.`` only, at most 128 (the MCP spec)."""
    return _BAD_NAME.sub("_", name)[:128] or "_"


class McpEndpoint:
    """The ``/mcp`` route's handler, and the session manager its app lifespan runs."""

    def __init__(self, api: Api) -> None:
        from mcp.server.lowlevel import Server
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        self.api = api
        server: Any = Server(
            "longtask",
            version=__version__,
            instructions=(
                "Each task tool starts a durable longtask thread and answers its status; "
                f"follow it with {STATUS_TOOL} and answer what it waits for with {ANSWER_TOOL}."
            ),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.manager = StreamableHTTPSessionManager(app=server, stateless=True, json_response=True)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    async def handle(self, request: Request) -> Response:
        return _Delegated(self.manager, caller_of(request))

    # -- tools ---------------------------------------------------------------------------

    def _tasks(self) -> dict[str, tuple[Registered, AssistantRow | None]]:
        """Each assistant's tool by name: the registered tasks', then the created ones (of
        a task served here) by name, the first of two with one name kept, as LangGraph's
        server keeps it."""
        registry = self.api.registry
        out: dict[str, tuple[Registered, AssistantRow | None]] = {
            tool_name(e.name): (e, None) for e in registry.by_name.values()
        }
        for row in self.api.runner.db.store.assistants(sorted(registry.by_name)):
            out.setdefault(tool_name(row.name), (registry.get(row.graph_id), row))
        return out

    async def _list_tools(self, ctx: Any, params: Any) -> Any:
        from mcp import types

        tools = []
        for name, (entry, row) in sorted((await self.api.call(self._tasks)).items()):
            task = entry.task
            schema: dict[str, Any] = (
                task.inputs.model_json_schema() if task.inputs is not None else {"type": "object"}
            )
            schema.setdefault("type", "object")
            what = f"task {entry.name!r}"
            if row is not None:
                # the inputs the assistant's context gives are not required of the caller
                given = set(row.context)
                schema["required"] = [r for r in schema.get("required", []) if r not in given]
                what = f"assistant {row.name!r} of task {entry.name!r}"
            tools.append(
                types.Tool(
                    name=name,
                    title=row.name if row is not None else entry.name,
                    description=(
                        (f"{row.description} " if row is not None and row.description else "")
                        + f"Start {what} (a durable longtask thread). Answers the "
                        f"thread id and where it stands after at most {WAIT:g} s; follow it "
                        f"with {STATUS_TOOL}."
                    ),
                    input_schema=schema,
                    annotations=types.ToolAnnotations(
                        read_only_hint=False,
                        destructive_hint=False,
                        idempotent_hint=False,
                        open_world_hint=True,
                    ),
                )
            )
        thread = {"thread_id": {"type": "string", "description": "the thread's id"}}
        tools += [
            types.Tool(
                name=STATUS_TOOL,
                title="Thread status",
                description="Where a thread stands: status, results so far, and the pauses "
                f"it waits for with how to answer each ({ANSWER_TOOL}).",
                input_schema={"type": "object", "properties": thread, "required": ["thread_id"]},
                annotations=types.ToolAnnotations(read_only_hint=True),
            ),
            types.Tool(
                name=ANSWER_TOOL,
                title="Answer a pause",
                description="Answer what a thread waits for, in the caller's name: an "
                "approval takes true or false (or {approved, comment}), a wait its payload. "
                "With several pauses, name the step or interrupt id.",
                input_schema={
                    "type": "object",
                    "properties": {
                        **thread,
                        "answer": {"description": "the decision or payload (JSON)"},
                        "step": {"type": "string", "description": "the step or interrupt id"},
                    },
                    "required": ["thread_id", "answer"],
                },
                annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False),
            ),
            types.Tool(
                name=THREADS_TOOL,
                title="Recent threads",
                description="The most recent threads with their task and status.",
                input_schema={
                    "type": "object",
                    "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 100}},
                },
                annotations=types.ToolAnnotations(read_only_hint=True),
            ),
        ]
        return types.ListToolsResult(tools=tools)

    async def _call_tool(self, ctx: Any, params: Any) -> Any:
        name = params.name
        args = dict(params.arguments or {})
        caller = _caller_of(ctx)
        try:
            if name == STATUS_TOOL:
                thread_id = _thread_arg(args)
                await self._may(caller, thread_id, "read")
                return _result(await self.api.call(self._status, thread_id))
            if name == ANSWER_TOOL:
                thread_id = _thread_arg(args)
                level = await self._may(caller, thread_id, "answer")
                answering = Answering(caller.name, thread_id, level)
                return _result(await self._answer(args, _name(caller), answering))
            if name == THREADS_TOOL:
                scope = await self.api.access.list_scope(caller)
                return _result(await self.api.call(self._threads, args.get("limit", 20), scope))
            found = (await self.api.call(self._tasks)).get(name)
            if found is None:
                from mcp.shared.exceptions import MCPError
                from mcp.types import INVALID_PARAMS

                raise MCPError(INVALID_PARAMS, f"Unknown tool: {name}")
            if caller.role == "viewer":
                raise _Refused(f"{caller.name!r} is a viewer: reads only")
            return _result(await self._start(*found, args, caller))
        except LongTaskError as exc:
            return _result({"error": str(exc)}, error=True)
        except _Refused as exc:
            return _result({"error": str(exc)}, error=True)
        except HTTPException as exc:  # an auth handler refused
            return _result({"error": exc.detail}, error=True)

    async def _may(self, caller: Caller, thread_id: str, needed: str) -> str:
        """As the route the tool stands for would be checked: a thread the caller may not
        see does not exist for them; one they see but may not ``needed`` is refused.
        Returns the caller's level on the thread."""
        level = await self.api.access.level_for(caller, thread_id, needed)
        if level is None or level == "none":
            # One answer for a thread that does not exist and one the caller may not see:
            # never "not in this database", which would be untrue of the second.
            raise _Refused(f"no thread {thread_id!r}")
        order = ("none", "read", "answer", "act")
        if order.index(level) < order.index(needed):
            raise _Refused(f"{caller.name!r} may not {needed} on thread {thread_id!r}")
        return level

    async def _start(
        self, entry: Registered, row: AssistantRow | None, args: dict[str, Any], caller: Caller
    ) -> dict[str, Any]:
        prepare = self.api.prepare
        assert prepare is not None, "the runs' routes are built first"
        body: dict[str, Any] = {"input": args}
        shown = row.assistant_id if row is not None else entry.assistant_id
        # with LangGraph's auth handlers, asked as for POST /runs (they may set an owner)
        metadata = await self.api.access.run_metadata(caller, None, shown, body)
        if metadata is not None:
            body["metadata"] = metadata
        run = await self.api.call(prepare, None, entry, body, _name(caller), row)
        return await self._after(run)

    async def _answer(
        self, args: dict[str, Any], actor: str, answering: Answering
    ) -> dict[str, Any]:
        thread_id = _thread_arg(args)
        if "answer" not in args:
            raise _Refused("give the answer: true/false for an approval, the payload for a wait")
        step = args.get("step")
        if step is not None and not isinstance(step, str):
            raise _Refused("step must be a step name or an interrupt id")

        def record() -> ApiRun:
            from longtask.serve.lgapi._runs import record as record_run

            runner = self.api.runner
            rec = runner.reads.thread(thread_id)
            entry = self.api.registry.find(rec.task_name)
            task = entry.for_thread(rec) if entry is not None else runner.engine.load(rec)
            request = plan_answer(runner, rec, task, step, None, args["answer"], actor, answering)
            assistant = entry.assistant_id if entry is not None else rec.task_name
            return record_run(self.api, thread_id, assistant, request, actor, queued=False)

        run = await self.api.call(record)
        return await self._after(run)

    async def _after(self, run: ApiRun) -> dict[str, Any]:
        """The thread once ``run`` has ended, or after ``WAIT`` seconds."""
        store = self.api.runner.db.store
        found: ApiRun | None = run
        with anyio.move_on_after(WAIT):
            while True:
                found = await self.api.call(store.api_run, run.run_id)
                if found is None or found.status in _FINAL:
                    break
                await anyio.sleep(0.1)
        out = await self.api.call(self._status, run.thread_id)
        out["run"] = {"run_id": run.run_id, "status": found.status if found else "deleted"}
        if found is not None and found.error:
            out["run"]["error"] = found.error
        return out

    def _status(self, thread_id: str) -> dict[str, Any]:
        runner = self.api.runner
        rec = runner.reads.thread(thread_id)
        entry = self.api.registry.find(rec.task_name)
        task = entry.for_thread(rec) if entry is not None else None
        st = runner.status(thread_id, usage=False)
        pending = runner.pending(thread_id, task=task) if task else []
        waiting = [p.summary() for p in pending]
        for p, w in zip(pending, waiting, strict=True):
            if p.kind == "approval":
                w["plan"] = p.request.get("plan")  # what is decided, not only its hash
            w["answer_with"] = {
                "tool": ANSWER_TOOL,
                "arguments": {"thread_id": thread_id, "step": w["interrupt_id"], "answer": "..."},
            }
        out: dict[str, Any] = plain(
            {
                "thread_id": thread_id,
                "task": rec.task_name,
                "status": st.status,
                "results": runner.results(thread_id),
                "waiting": waiting,
                **({"error": rec.error} if rec.error else {}),
            }
        )
        return out

    def _threads(self, limit: Any, scope: ListScope) -> dict[str, Any]:
        if not isinstance(limit, int) or not 1 <= limit <= 100:
            raise _Refused("limit is a whole number from 1 to 100")
        passes = scope.passes
        found = self.api.runner.db.store.list_threads(
            limit=limit if passes is None else 10_000,
            visible_to=scope.name,
            visible_meta=scope.metadata,
        )
        if passes is not None:
            found = [r for r in found if passes(r.thread_id)]
        return {
            "threads": [
                {"thread_id": r.thread_id, "task": r.task_name, "status": r.status}
                for r in found[:limit]
            ]
        }


class _Refused(Exception):
    """A tool's arguments a person can fix."""


def _thread_arg(args: dict[str, Any]) -> str:
    thread_id = args.get("thread_id")
    if not isinstance(thread_id, str) or not thread_id:
        raise _Refused("thread_id is required (a thread's id, as a task tool answered it)")
    return thread_id


def _caller_of(ctx: Any) -> Caller:
    request = getattr(ctx, "request", None)
    scope = getattr(request, "scope", None) or {}
    caller = scope.get(CALLER_KEY)
    assert isinstance(caller, Caller), "/mcp is reached only through the authorization layer"
    return caller


def _name(caller: Caller) -> str:
    """Who acts: a signed-in caller's name (open mode lets nobody act)."""
    if caller.name is None:
        raise _Refused("acting needs a bearer token: open mode only reads")
    return caller.name


def _result(value: dict[str, Any], *, error: bool = False) -> Any:
    from mcp import types

    text = json.dumps(value, ensure_ascii=False, default=str)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=value,
        is_error=error,
    )


class _Delegated(Response):
    """Hands the request to the MCP session manager, with the caller's name in its scope
    (the manager answers on ``send`` itself)."""

    def __init__(self, manager: Any, caller: Caller) -> None:
        super().__init__()
        self.manager = manager
        self.caller = caller

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.manager.handle_request({**scope, CALLER_KEY: self.caller}, receive, send)
