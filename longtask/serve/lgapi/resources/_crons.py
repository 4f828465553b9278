"""The LangGraph Server API's crons, on longtask's schedules.

A cron is a schedule (``longtask_schedules``, origin ``api``, named by the cron's id) whose
``api`` column holds what it asks: the assistant, the thread of a thread cron, and the run
request each tick records. Ticks fire where every schedule fires (serve's loop, workers,
``longtask tick``), once per tick whatever fires them; a tick records a run (and, for a
cron of an assistant, the new thread it runs on) that serve's executor carries out as any
run: no request runs a task.

A cron belongs to whoever made it (its ``user_id``, the owner of the runs and threads it
starts). Only they (and the roles that see everything) see it; they and admins change it.
With LangGraph's auth handlers, the ``crons`` handlers decide, with LangGraph's values.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from longtask.errors import LongTaskError
from longtask.model._schedule import cron_problems, next_tick, timezone_problem
from longtask.serve._webhooks import check_url, redacted
from longtask.serve.access import about, caller_of, matches
from longtask.serve.lgapi._body import integer_field, mapping_field, text_field
from longtask.serve.lgapi._chat import chat_input
from longtask.serve.lgapi._runs import _config_of, _kwargs, refuse_unsupported
from longtask.serve.lgapi._stream import checked_modes
from longtask.serve.lgapi.resources._assistant_body import inputs_with_context, run_settings
from longtask.store import ScheduleRecord

if TYPE_CHECKING:
    from longtask.serve._registry import Registered
    from longtask.serve.lgapi._common import Api
    from longtask.store import Store
    from longtask.store._assistants import AssistantRow

#: what a search may sort by and select, as on LangGraph's server
SORTS = (
    "cron_id",
    "assistant_id",
    "thread_id",
    "next_run_date",
    "end_time",
    "created_at",
    "updated_at",
)
FIELDS = (
    "cron_id",
    "assistant_id",
    "thread_id",
    "on_run_completed",
    "end_time",
    "schedule",
    "timezone",
    "created_at",
    "updated_at",
    "user_id",
    "payload",
    "next_run_date",
    "metadata",
    "enabled",
)
#: the fields of a cron's payload a PATCH may change (LangGraph's CronPatch)
PATCHABLE = (
    "schedule",
    "timezone",
    "end_time",
    "input",
    "metadata",
    "config",
    "context",
    "webhook",
    "interrupt_before",
    "interrupt_after",
    "on_run_completed",
    "enabled",
    "stream_mode",
    "stream_subgraphs",
    "stream_resumable",
    "durability",
)


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat() if ts is not None else None


def cron_json(rec: ScheduleRecord) -> dict[str, Any]:
    """A cron as LangGraph's server answers it."""
    api = rec.api or {}
    return {
        "cron_id": rec.name,
        "assistant_id": api.get("assistant_id"),
        "thread_id": api.get("thread_id"),
        "on_run_completed": api.get("on_run_completed"),
        "end_time": _iso(api.get("end_time")),
        "schedule": rec.cron,
        "timezone": api.get("timezone"),
        "created_at": rec.created_at.isoformat() if rec.created_at else None,
        "updated_at": rec.updated_at.isoformat() if rec.updated_at else None,
        "user_id": rec.owner,
        "payload": api.get("payload") or {},
        "next_run_date": rec.next_fire_at.isoformat(),
        "metadata": api.get("metadata") or {},
        "enabled": not rec.paused,
    }


def _end_time(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            when = None
        if when is not None:
            return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    raise HTTPException(
        422, f"end_time must be an ISO 8601 date-time such as '2030-01-01T00:00:00Z', not {value!r}"
    )


def _schedule_of(payload: dict[str, Any]) -> tuple[str, str | None]:
    """The cron expression and the timezone given, checked: a 422 naming the fix."""
    schedule = payload.get("schedule")
    if not isinstance(schedule, str):
        raise HTTPException(
            422, "schedule is required: a cron expression such as '0 9 * * *' (09:00 daily)"
        )
    problems = cron_problems(schedule)
    timezone = text_field(payload, "timezone")
    if timezone is not None and (p := timezone_problem(timezone)) is not None:
        problems.append(p)
    if problems:
        raise HTTPException(422, "; ".join(problems))
    return schedule.strip(), timezone


class Crons:
    """The routes' work: building a cron from a request's payload, and finding crons."""

    def __init__(self, api: Api) -> None:
        self.api = api

    # -- building ----------------------------------------------------------------------------

    def build(
        self,
        cron_id: str,
        entry: Registered,
        thread_id: str | None,
        payload: dict[str, Any],
        owner: str | None,
        old: ScheduleRecord | None = None,
        assistant: AssistantRow | None = None,
    ) -> ScheduleRecord:
        """The schedule of a cron asking ``payload``, checked (raises, storing nothing)."""
        from longtask.ops._schedules import stable_ref

        schedule, timezone = _schedule_of(payload)
        if payload.get("enabled") is not None and not isinstance(payload["enabled"], bool):
            raise HTTPException(422, f"enabled must be true or false, not {payload['enabled']!r}")
        refuse_unsupported(payload)
        config = _config_of(payload)
        # what each tick's run applies: a created assistant's config and context under the
        # cron's own, as for a run
        settings = run_settings(assistant, payload, config)
        shown_id = assistant.assistant_id if assistant is not None else entry.assistant_id
        metadata = mapping_field(payload, "metadata")
        webhook = check_url(payload["webhook"]) if payload.get("webhook") is not None else None
        if self.api.webhooks_off:
            webhook = None  # http.disable_webhooks: never called
        # a thread's cron runs on its thread: nothing to do with it after (null, as there)
        on_completed = None
        if thread_id is None:
            on_completed = payload.get("on_run_completed") or "delete"
            if on_completed not in ("delete", "keep"):
                raise HTTPException(
                    422, f"on_run_completed must be 'delete' or 'keep', not {on_completed!r}"
                )
        modes = checked_modes(payload.get("stream_mode"))
        raw = payload.get("input")
        if raw is not None and not isinstance(raw, dict):
            raise HTTPException(422, "a cron's input is an object of the task's inputs")
        if thread_id is None:
            # Every tick starts the task on a new thread: inputs it refuses are refused now.
            inputs = inputs_with_context(
                self.api.runner, entry.task, chat_input(raw, entry.task), settings["context"]
            )
            self.api.runner.engine.validate_inputs(entry.task, inputs or {})
        body = {"input": raw} if raw is not None else {}
        request = {
            "kind": "queued",
            "body": body,
            "multitask_strategy": payload.get("multitask_strategy") or "enqueue",
            "stream_mode": sorted(modes),
            "stream_subgraphs": bool(payload.get("stream_subgraphs")),
            "kwargs": _kwargs(payload, config, "", False, webhook),
            **settings,
            "graph": entry.name,
        }
        shown = {**payload, "assistant_id": shown_id}
        shown_config = dict(shown.get("config") or {})
        shown_config["configurable"] = {
            **(shown_config.get("configurable") or {}),
            "cron_id": cron_id,
        }
        shown["config"] = shown_config  # as LangGraph's server shows it
        if webhook:
            shown["webhook"] = redacted(webhook)  # readers of a cron may not call its receiver
        api = {
            "assistant_id": shown_id,
            "thread_id": thread_id,
            "on_run_completed": on_completed,
            "end_time": _end_time(payload.get("end_time")),
            "timezone": timezone,
            "payload": shown,
            "metadata": metadata,
            "webhook": webhook,
            "request": request,
        }
        zone = timezone or "UTC"
        keep = old is not None and (old.cron, old.timezone) == (schedule, zone)
        return ScheduleRecord(
            name=cron_id,
            task_ref=stable_ref(entry.ref),
            task_name=entry.name,
            cron=schedule,
            timezone=zone,
            inputs={},
            catch_up="one",
            origin="api",
            paused=payload.get("enabled") is False,
            next_fire_at=(
                old.next_fire_at
                if keep and old is not None
                else next_tick(schedule, zone, self.api.runner.clock())
            ),
            owner=owner,
            api=api,
        )

    # -- finding -----------------------------------------------------------------------------

    def all(self) -> list[ScheduleRecord]:
        return [r for r in self.api.runner.db.store.schedules() if r.api is not None]

    def sees(self, request: Request, rec: ScheduleRecord, wanted: Any = None) -> bool:
        """Whether the caller may see the cron: by the filter an auth handler returned
        (``wanted``, matched against its metadata), else its owner and the roles that see
        everything."""
        caller = caller_of(request)
        if wanted is not None:
            return matches((rec.api or {}).get("metadata") or {}, wanted)
        return caller.sees_everything or (caller.name is not None and rec.owner == caller.name)

    def changes(self, request: Request, rec: ScheduleRecord) -> None:
        """A 403 unless the caller may change the cron: its owner, or an admin."""
        caller = caller_of(request)
        if caller.role == "admin" or (caller.name is not None and rec.owner == caller.name):
            return
        raise HTTPException(403, f"{caller.name!r} may not change cron {rec.name!r}: not its owner")


def drop_thread_crons(store: Store, thread_id: str) -> list[str]:
    """Delete the crons of a thread that is deleted; their names."""
    gone = [
        r.name
        for r in store.schedules()
        if r.api is not None and r.api.get("thread_id") == thread_id
    ]
    for name in gone:
        store.schedule_delete(name)
    return gone


def _sorted(rows: list[dict[str, Any]], body: dict[str, Any]) -> list[dict[str, Any]]:
    sort_by = body.get("sort_by") or "created_at"
    order = body.get("sort_order") or "desc"
    if sort_by not in SORTS:
        raise HTTPException(422, f"sort_by must be one of {', '.join(SORTS)}, not {sort_by!r}")
    if order not in ("asc", "desc"):
        raise HTTPException(422, f"sort_order must be 'asc' or 'desc', not {order!r}")
    return sorted(
        rows, key=lambda c: (c[sort_by] is None, str(c[sort_by] or "")), reverse=order == "desc"
    )


def _select(body: dict[str, Any]) -> list[str] | None:
    select = body.get("select")
    if not select:
        return None
    if not isinstance(select, list) or any(f not in FIELDS for f in select):
        raise HTTPException(422, f"select takes a list of {', '.join(FIELDS)}, not {select!r}")
    return [str(f) for f in select]


def routes(api: Api) -> list[Route]:
    crons = Crons(api)
    store = api.runner.db.store

    async def _readable(request: Request, assistant: AssistantRow | None) -> None:
        """A created assistant is read through its handlers, as for a run (404 if not)."""
        if assistant is None:
            return
        filters = await api.access.ask(
            request, "assistants", "read", {"assistant_id": assistant.assistant_id}
        )
        if not matches(assistant.metadata, filters):
            raise HTTPException(404, f"no assistant {assistant.assistant_id!r}")

    async def create(request: Request, actor: str) -> Response:
        thread_id = request.path_params.get("thread_id")
        payload = await api.json_body(request)
        if "assistant_id" not in payload:
            raise HTTPException(422, "assistant_id is required: the assistant (task) to run")
        entry, assistant = await api.call(api.resolve, str(payload["assistant_id"]))
        await _readable(request, assistant)
        if thread_id is not None:
            found = await api.call(store.thread_owner, thread_id)
            if not found[0]:
                raise HTTPException(404, f"no thread {thread_id!r}")
            # With LangGraph's auth handlers the gate leaves crons to this route: the
            # thread must be one the threads handler lets the caller read, as there.
            shown = await api.access.ask(request, "threads", "read", {"thread_id": thread_id})
            if shown is not None:
                metadata = await api.call(api.access.metadata_of, thread_id)
                if not matches(metadata, shown):
                    raise HTTPException(404, f"no thread {thread_id!r}")
            started = await api.call(store.get_thread, thread_id)
            if started is not None and started.task_name != entry.name:
                raise HTTPException(
                    422, f"thread {thread_id!r} runs task {started.task_name!r}, not {entry.name!r}"
                )
        cron_id = str(uuid.uuid4())
        value = {
            "payload": payload,
            "schedule": payload.get("schedule"),
            "cron_id": cron_id,
            "thread_id": thread_id,
            "user_id": actor,
            "end_time": payload.get("end_time"),
            "metadata": mapping_field(payload, "metadata"),
        }
        await api.access.ask(request, "crons", "create", value)
        # What the handler set in the metadata (an owner) is the cron's, as on LangGraph's
        if isinstance(value.get("metadata"), dict) and value["metadata"]:
            payload = {**payload, "metadata": value["metadata"]}
        try:
            rec = await api.call(
                crons.build, cron_id, entry, thread_id, payload, actor, None, assistant
            )
        except LongTaskError as exc:  # the task refuses the input: say why
            raise HTTPException(422, str(exc)) from None
        await api.call(store.schedule_put, rec)
        saved = await api.call(store.schedule_get, cron_id)
        assert saved is not None
        return JSONResponse(cron_json(saved))

    async def get(request: Request) -> Response:
        cron_id = request.path_params["cron_id"]
        wanted = await api.access.ask(request, "crons", "read", {"cron_id": cron_id})
        rec = await api.call(store.schedule_get, cron_id)
        if rec is None or rec.api is None:
            raise HTTPException(404, f"no cron {cron_id!r}")
        if not crons.sees(request, rec, wanted):
            raise HTTPException(404, f"no cron {cron_id!r}")
        return JSONResponse(cron_json(rec))

    async def patch(request: Request, actor: str) -> Response:
        cron_id = request.path_params["cron_id"]
        payload = await api.json_body(request)
        if not payload:
            raise HTTPException(400, "the body cannot be empty: give the fields to change")
        unknown = sorted(set(payload) - set(PATCHABLE))
        if unknown:
            raise HTTPException(
                422, f"a cron's {', '.join(unknown)} cannot be changed; send {', '.join(PATCHABLE)}"
            )
        value: dict[str, Any] = {
            "cron_id": cron_id,
            "payload": payload,
            "schedule": payload.get("schedule"),
        }
        if "metadata" in payload:
            value["metadata"] = mapping_field(payload, "metadata")
        wanted = await api.access.ask(request, "crons", "update", value)
        old = await api.call(store.schedule_get, cron_id)
        if old is None or old.api is None or not crons.sees(request, old, wanted):
            raise HTTPException(404, f"no cron {cron_id!r}")
        if wanted is None:
            crons.changes(request, old)
        entry, assistant = await api.call(api.resolve, str(old.api["assistant_id"]))
        merged = {**(old.api.get("payload") or {}), **payload}
        # metadata is merged into the cron's, as on LangGraph's server
        merged["metadata"] = {**(old.api.get("metadata") or {}), **(value.get("metadata") or {})}
        if old.api.get("webhook") and "webhook" not in payload:
            merged["webhook"] = old.api["webhook"]  # shown redacted; the stored one stays
        merged["schedule"] = payload.get("schedule") or old.cron
        if "timezone" not in payload and old.api.get("timezone") is not None:
            merged["timezone"] = old.api["timezone"]
        if "end_time" not in payload and old.api.get("end_time") is not None:
            merged["end_time"] = _iso(old.api["end_time"])
        try:
            rec = await api.call(
                crons.build,
                cron_id,
                entry,
                old.api.get("thread_id"),
                merged,
                old.owner,
                old,
                assistant,
            )
        except LongTaskError as exc:  # the task refuses the input: say why
            raise HTTPException(422, str(exc)) from None
        await api.call(store.schedule_put, rec)
        if "enabled" in payload and payload["enabled"] != (not old.paused):
            again = None if rec.paused else next_tick(rec.cron, rec.timezone, api.runner.clock())
            await api.call(store.schedule_pause, cron_id, rec.paused, again)
        saved = await api.call(store.schedule_get, cron_id)
        assert saved is not None
        return JSONResponse(cron_json(saved))

    async def delete(request: Request, actor: str) -> Response:
        cron_id = request.path_params["cron_id"]
        wanted = await api.access.ask(request, "crons", "delete", {"cron_id": cron_id})
        rec = await api.call(store.schedule_get, cron_id)
        if rec is None or rec.api is None or not crons.sees(request, rec, wanted):
            raise HTTPException(404, f"no cron {cron_id!r}")
        if wanted is None:
            crons.changes(request, rec)
        await api.call(store.schedule_delete, cron_id)
        return Response(status_code=204)

    async def found(request: Request, body: dict[str, Any], action: str) -> list[dict[str, Any]]:
        assistant = text_field(body, "assistant_id")
        thread_id = text_field(body, "thread_id")
        metadata = mapping_field(body, "metadata")
        enabled = body.get("enabled")
        if enabled is not None and not isinstance(enabled, bool):
            raise HTTPException(422, f"enabled must be true or false, not {enabled!r}")
        value: dict[str, Any] = {
            "assistant_id": assistant,
            "thread_id": thread_id,
            "limit": body.get("limit", 10) if action == "search" else 0,
            "offset": body.get("offset", 0) if action == "search" else 0,
            "metadata": metadata,
        }
        wanted = await api.access.ask(request, "crons", "search", value)
        if assistant is not None:
            entry = api.registry.find(assistant)
            assistant = entry.assistant_id if entry is not None else assistant
        rows = await api.call(crons.all)
        return [
            cron_json(r)
            for r in rows
            if crons.sees(request, r, wanted)
            and (assistant is None or (r.api or {}).get("assistant_id") == assistant)
            and (thread_id is None or (r.api or {}).get("thread_id") == thread_id)
            and (enabled is None or enabled == (not r.paused))
            and matches((r.api or {}).get("metadata") or {}, metadata)
        ]

    async def search(request: Request) -> Response:
        body = await api.json_body(request)
        limit = integer_field(body, "limit", 10, 1, 1000)
        offset = integer_field(body, "offset", 0, 0, 10**9)
        select = _select(body)
        rows = _sorted(await found(request, body, "search"), body)
        page = rows[offset : offset + limit]
        if select:
            page = [{k: c[k] for k in select} for c in page]
        # LangGraph's headers: the total known so far, and the next page's offset if any
        if offset + limit < len(rows):
            headers = {"X-Pagination-Total": str(offset + limit + 1)}
            headers["X-Pagination-Next"] = str(offset + limit)
        else:
            headers = {"X-Pagination-Total": str(offset + len(page))}
        return JSONResponse(page, headers=headers)

    async def count(request: Request) -> Response:
        body = await api.json_body(request)
        return JSONResponse(len(await found(request, body, "count")))

    one = "/runs/crons/{cron_id}"
    return [
        Route("/runs/crons", about("crons", api.actor(create)), methods=["POST"]),
        Route("/runs/crons/search", about("crons", api.reader(search)), methods=["POST"]),
        Route("/runs/crons/count", about("crons", api.reader(count)), methods=["POST"]),
        Route(one, about("crons", api.reader(get)), methods=["GET"]),
        Route(one, about("crons", api.actor(patch)), methods=["PATCH"]),
        Route(one, about("crons", api.actor(delete)), methods=["DELETE"]),
        Route(
            "/threads/{thread_id}/runs/crons", about("crons", api.actor(create)), methods=["POST"]
        ),
    ]
