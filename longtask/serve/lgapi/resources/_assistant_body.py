"""What the assistants' routes share with the runs': an assistant as the API shows it,
the checks of a create or update body, and how a run applies an assistant's configuration.

A created assistant is a versioned configuration of a registered task. Its ``config``
(``tags``, ``metadata``, ``run_name``, ``recursion_limit``, ``configurable``) goes into
the LangGraph run config of a thread's first run, the run's over the assistant's, as
LangGraph's server merges them; its ``context`` is kept equal to ``config.configurable``
(as on LangGraph's server), so a step reads it with ``langgraph.config.get_config()``,
and the context keys that name the task's inputs are those inputs' defaults when a
thread starts (the run's ``context`` and ``input`` over them).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException

from longtask.errors import InvalidInput
from longtask.model import takes_context
from longtask.serve.lgapi._body import mapping_field, text_field

if TYPE_CHECKING:
    from longtask._runner import Runner
    from longtask.model import LongTask
    from longtask.store._assistants import AssistantRow

#: the keys of an assistant's config a longtask run takes (a Runner's run config)
CONFIG_KEYS = ("tags", "metadata", "run_name", "recursion_limit", "configurable")
#: configurable keys the run sets itself: an assistant may not
RUN_SET = (
    "thread_id",
    "checkpoint_ns",
    "checkpoint_id",
    "run_id",
    "assistant_id",
    "graph_id",
    "longtask_run",
)
#: what ``select`` may name, as on LangGraph's server
FIELDS = (
    "assistant_id",
    "graph_id",
    "name",
    "description",
    "config",
    "context",
    "created_at",
    "updated_at",
    "metadata",
    "version",
)
SORTS = ("assistant_id", "graph_id", "name", "created_at", "updated_at")


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def row_json(row: AssistantRow, *, version_row: bool = False) -> dict[str, Any]:
    """An assistant (or one of its versions: no ``updated_at``) as LangGraph shows it."""
    out: dict[str, Any] = {
        "assistant_id": row.assistant_id,
        "graph_id": row.graph_id,
        "config": row.config,
        "context": row.context,
        "metadata": row.metadata,
        "name": row.name,
        "description": row.description,
        "version": row.version,
        "created_at": iso(row.created_at),
    }
    if not version_row:
        out["updated_at"] = iso(row.updated_at)
    return out


def check_uuid(value: Any) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise HTTPException(
            422, f"Invalid assistant ID: must be a UUID, not {value!r} (omit it for a new one)"
        ) from None


def check_config(body: dict[str, Any]) -> dict[str, Any]:
    """The body's ``config``: an object of the keys a run takes (a 422 naming what is not)."""
    config = mapping_field(body, "config")
    unknown = sorted(k for k in config if k not in CONFIG_KEYS)
    if unknown:
        raise HTTPException(
            422,
            f"config key(s) {', '.join(map(repr, unknown))} are not taken: an assistant's "
            f"config holds {', '.join(CONFIG_KEYS)}",
        )
    for key in ("configurable", "metadata"):
        value = config.get(key)
        if value is not None and not isinstance(value, dict):
            raise HTTPException(422, f"config.{key} must be an object, not {value!r}")
    tags = config.get("tags")
    if tags is not None and (
        not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)
    ):
        raise HTTPException(422, f"config.tags must be a list of strings, not {tags!r}")
    if config.get("run_name") is not None and not isinstance(config["run_name"], str):
        raise HTTPException(422, f"config.run_name must be a string, not {config['run_name']!r}")
    limit = config.get("recursion_limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise HTTPException(
            422, f"config.recursion_limit must be a positive integer, not {limit!r}"
        )
    taken = sorted(k for k in config.get("configurable") or {} if k in RUN_SET)
    if taken:
        raise HTTPException(
            422,
            f"config.configurable may not set {', '.join(map(repr, taken))}: each run sets it",
        )
    return dict(config)


def synced(
    config: dict[str, Any], context: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """config and context kept equal, as LangGraph's server keeps them (both given: 400)."""
    configurable = config.get("configurable")
    if configurable and context:
        raise HTTPException(
            400,
            "Cannot specify both configurable and context: send context alone (config."
            "configurable is kept equal to it)",
        )
    if configurable:
        return config, dict(configurable)
    if context:
        return {**config, "configurable": dict(context)}, context
    return config, context


def check_body(body: dict[str, Any], *, create: bool) -> dict[str, Any]:
    """The fields of a create (or patch) body, checked; a 422 names the one that is wrong."""
    out: dict[str, Any] = {"config": check_config(body)}
    for key in ("context", "metadata"):
        out[key] = mapping_field(body, key) if body.get(key) is not None else None
    out["name"] = text_field(body, "name")
    out["description"] = text_field(body, "description")
    out["graph_id"] = text_field(body, "graph_id")
    if create:
        if not out["graph_id"]:
            raise HTTPException(422, "graph_id is required: the name of a task serve was given")
        if_exists = body.get("if_exists") or "raise"
        if if_exists not in ("raise", "do_nothing"):
            raise HTTPException(
                422, f"if_exists must be 'raise' or 'do_nothing', not {body.get('if_exists')!r}"
            )
        out["if_exists"] = if_exists
        given = body.get("assistant_id")
        out["assistant_id"] = check_uuid(given) if given is not None else str(uuid.uuid4())
    return out


def run_settings(
    assistant: AssistantRow | None, body: dict[str, Any], config: dict[str, Any]
) -> dict[str, Any]:
    """What a run applies: ``context`` (the inputs' defaults, the run's over the
    assistant's) and ``run_config`` (the assistant's config under the run's), recorded with
    the run so the thread runs on the version it was started with."""
    base_config = assistant.config if assistant is not None else {}
    base_context = assistant.context if assistant is not None else {}
    context = {**base_context, **mapping_field(body, "context")}
    merged: dict[str, Any] = {
        k: v for k, v in {**base_config, **config}.items() if k in CONFIG_KEYS and v is not None
    }
    configurable = {
        k: v
        for k, v in {
            **(base_config.get("configurable") or {}),
            **(config.get("configurable") or {}),
            **context,
        }.items()
        if k not in RUN_SET and not k.startswith("__") and k != "checkpoint_map"
    }
    if configurable:
        merged["configurable"] = configurable
    else:
        merged.pop("configurable", None)
    if base_config.get("metadata") or config.get("metadata"):
        merged["metadata"] = {
            **(base_config.get("metadata") or {}),
            **(config.get("metadata") or {}),
        }
    out: dict[str, Any] = {"context": context, "run_config": merged}
    if assistant is not None:
        out["assistant"] = {"assistant_id": assistant.assistant_id, "version": assistant.version}
    return out


def run_context(task: LongTask, settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """The run context a run's ``settings`` (``run_settings``, as recorded with the run)
    give its task's graph steps, as LangGraph's server makes it: the run's ``context`` over
    its assistant's, which is also its config's ``configurable`` (where a run that sends
    only ``configurable`` has its settings); None for a task with no graph step (its
    context gave its inputs' defaults)."""
    if not takes_context(task.steps.values()):
        return None
    configurable = (settings.get("run_config") or {}).get("configurable") or {}
    return {**configurable, **(settings.get("context") or {})}


def inputs_with_context(
    runner: Runner, task: LongTask, raw_input: dict[str, Any] | None, context: dict[str, Any] | None
) -> dict[str, Any] | None:
    """A new thread's inputs: the context's keys that name the task's inputs are their
    defaults (all of the context is in the run's config.configurable), checked against the
    task's inputs (InvalidInput naming the keys the context gave; nothing is stored)."""
    given = raw_input or {}
    fields = task.inputs.model_fields if task.inputs is not None else {}
    defaults = {k: v for k, v in (context or {}).items() if k in fields}
    if defaults:
        raw_input = {**defaults, **given}
    try:
        runner.engine.validate_inputs(task, raw_input or {})
    except InvalidInput as exc:
        from_context = sorted(set(defaults) - set(given))
        if not from_context:
            raise
        raise InvalidInput(
            f"{exc} (context gives {', '.join(from_context)}: the assistant's, or the "
            "run's; send them in the input, or update the assistant)"
        ) from None
    return raw_input
