"""The Runner is a façade composed of named parts, not a stack of mixins (issue 31): each of
its methods is one part's, and each part is built from its constructor's arguments alone."""

from __future__ import annotations

import inspect

from longtask import Runner
from longtask._runner import _Via
from longtask.ops import Copies, Migrations, Moves, Reports, Retention, Scheduler
from longtask.runtime import (
    Compensator,
    Control,
    Engine,
    Gotos,
    Notifier,
    Pauses,
    Queue,
    Reads,
    Streams,
    Subtasks,
    TimeTravel,
    Turns,
    Watch,
)

PARTS = {
    "reads": Reads,
    "queue": Queue,
    "gotos": Gotos,
    "compensator": Compensator,
    "engine": Engine,
    "pauses": Pauses,
    "control": Control,
    "watch": Watch,
    "travel": TimeTravel,
    "streams": Streams,
    "subtasks": Subtasks,
    "turns": Turns,
    "reports": Reports,
    "moves": Moves,
    "copies": Copies,
    "retention": Retention,
    "scheduler": Scheduler,
    "migrations": Migrations,
    "notifier": Notifier,
}


def test_the_runner_and_its_parts_inherit_nothing() -> None:
    assert Runner.__bases__ == (object,)
    for cls in PARTS.values():
        assert cls.__bases__ == (object,), cls


def test_every_method_of_the_runner_is_a_parts() -> None:
    delegated = {n: v for n, v in vars(Runner).items() if isinstance(v, _Via)}
    assert len(delegated) > 60
    for name, via in delegated.items():
        part = PARTS[via.part]
        assert callable(getattr(part, via.name, None)), f"Runner.{name}: {part.__name__}"
        # the part's own signature and docstring, minus self
        own = inspect.signature(getattr(part, via.name))
        assert next(iter(own.parameters)) == "self"
        assert via.__doc__ == getattr(part, via.name).__doc__


def test_a_runner_is_built_from_its_parts(tmp_path: object) -> None:
    with Runner(f"sqlite:///{tmp_path}/parts.db") as runner:
        for attr, cls in PARTS.items():
            assert isinstance(getattr(runner, attr), cls), attr
        # the method is the part's, bound to the part this runner holds
        assert runner.approve.__self__ is runner.pauses  # type: ignore[attr-defined]
        assert runner.prune.__self__ is runner.retention  # type: ignore[attr-defined]


def test_each_part_takes_what_it_needs_in_its_constructor() -> None:
    for cls in PARTS.values():
        params = list(inspect.signature(cls.__init__).parameters)[1:]
        assert params, f"{cls.__name__} takes nothing"
        # a part is given the parts it uses, never the Runner (the rooms below it cannot
        # import the façade: tests/unit/test_architecture.py)
        assert "runner" not in params, cls
