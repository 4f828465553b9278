"""A caller's inputs and commands as a run needs them: inputs checked against the task's
model (every unknown key refused), and a ``Command`` translated from step names to
LangGraph's channels and entry nodes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langgraph.types import Command
from pydantic import BaseModel, ValidationError

from longtask.errors import InvalidInput, describe_validation
from longtask.graphs import entry_node
from longtask.model import takes_context

if TYPE_CHECKING:
    from longtask.model import LongTask


def validate_inputs(task: LongTask, inputs: Mapping[str, Any] | BaseModel | None) -> Any:
    """``inputs`` checked against ``task``'s inputs model, kept as plain JSON."""
    if task.inputs is None:
        if isinstance(inputs, BaseModel):
            return inputs
        if inputs is not None and not isinstance(inputs, Mapping):
            raise InvalidInput(f"task inputs must be a JSON object, got {type(inputs).__name__}")
        return dict(inputs or {})
    if isinstance(inputs, Mapping) and task.inputs.model_config.get("extra") is None:
        # pydantic drops unknown keys by default: a misspelt input would vanish silently.
        # A model that sets `extra` ("allow", "ignore", "forbid") decides for itself.
        known: set[Any] = set()
        for name, field in task.inputs.model_fields.items():
            known.update((name, field.alias, field.validation_alias))
        unknown = [k for k in inputs if k not in known]
        if unknown:
            raise InvalidInput(
                f"inputs for task {task.name!r} have unknown key"
                f"{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                f"{task.inputs.__name__} takes {', '.join(task.inputs.model_fields) or 'none'}"
            )
    try:
        if isinstance(inputs, task.inputs):
            model = inputs
        else:
            raw = inputs.model_dump() if isinstance(inputs, BaseModel) else (inputs or {})
            model = task.inputs.model_validate(raw)
        # Kept as plain JSON: the task's model rebuilds them for its steps, and
        # LangGraph's get_state shows them as they are.
        return model.model_dump(mode="json")
    except ValidationError as exc:
        raise InvalidInput(
            f"inputs for task {task.name!r} do not match {task.inputs.__name__}: "
            f"{describe_validation(exc)}"
        ) from exc


def validate_context(task: LongTask, context: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A run context checked: a JSON object, for a task with a graph step (whose graph reads
    it as LangGraph's runtime context); kept as plain JSON. None: none given."""
    if context is None:
        return None
    if not isinstance(context, Mapping) or not all(isinstance(k, str) for k in context):
        raise InvalidInput(
            f"a run context must be a JSON object with string keys, got {type(context).__name__}"
        )
    if not takes_context(task.steps.values()):
        if not context:
            return None
        raise InvalidInput(
            f"task {task.name!r} has no graph step, so nothing reads a run context "
            f"(given: {', '.join(sorted(context))}); pass settings as the task's inputs"
        )
    try:
        # canonical and plain: a checkpoint and the thread's record keep it as JSON
        return dict(json.loads(json.dumps(dict(context), allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"a run context must be plain JSON: {exc}") from None


def translate(task: LongTask, command: Command[Any]) -> Command[Any]:
    """A command's ``resume`` and ``goto`` as LangGraph needs them: a goto's steps as their
    entry nodes, refusing unknown steps. (Its ``update`` is an outside write of the state:
    the run core hands it to the gate, ``runtime._gate``, which writes it before the run.)"""
    goto = command.goto
    targets: list[Any] = [goto] if isinstance(goto, str) else list(goto or ())  # type: ignore[arg-type]
    bad = [g for g in targets if isinstance(g, str) and g not in task.steps]
    if bad:
        raise InvalidInput(f"cannot go to {', '.join(map(repr, bad))}: not a step of {task.name!r}")
    # A step name means the step from its start: a map's dispatch, a pause's request.
    entries = [entry_node(task, g) if isinstance(g, str) else g for g in targets]
    goto = entries[0] if isinstance(goto, str) else entries
    return Command(resume=command.resume, goto=goto, graph=command.graph)
