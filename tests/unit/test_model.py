"""Definition-time validation and the definition hash (no database)."""

from __future__ import annotations

import pytest

from longtask import DefinitionError, LongTask, Retry, Stage, function_step


def step(name: str, after: list[str] | None = None, **kw: object) -> object:
    def fn(ctx: object) -> str:
        return name

    fn.__qualname__ = f"fn_{name}"
    return function_step(fn, name=name, after=after or [], **kw)  # type: ignore[arg-type]


def test_every_problem_reported_at_once() -> None:
    with pytest.raises(DefinitionError) as info:
        LongTask(
            "broken",
            stages=[
                Stage("one", [step("a"), step("b", after=["c"]), step("c", after=["b"])]),
                Stage("two", [step("a"), step("d", after=["nowhere"])]),
            ],
        )
    problems = info.value.problems
    text = str(info.value)
    assert any("cycle" in p and "b" in p and "c" in p for p in problems), problems
    assert any("unknown step 'nowhere'" in p for p in problems), problems
    assert any("duplicate step name 'a'" in p for p in problems), problems
    assert len(problems) == 3, problems
    assert "3 definition problems" in text


def test_later_stage_dependency_reserved_and_unsafe_names() -> None:
    with pytest.raises(DefinitionError) as info:
        LongTask(
            "t",
            stages=[
                Stage("first", [step("x", after=["y"])]),
                Stage("second", [step("y")]),
                Stage("Bad Stage", [step("inputs"), step("has-dash"), step("lt_internal")]),
                Stage("first", [step("z")]),
            ],
        )
    problems = "\n".join(info.value.problems)
    assert "depends on 'y', which is in the later stage 'second'" in problems
    assert "stage name 'Bad Stage' is not allowed" in problems
    assert "step name 'inputs' is reserved" in problems
    assert "step name 'has-dash' is not allowed" in problems
    assert "step name 'lt_internal' is reserved" in problems
    assert "duplicate stage name 'first'" in problems


def test_bad_policies_and_empty_stages() -> None:
    with pytest.raises(DefinitionError) as info:
        LongTask(
            "t",
            stages=[
                Stage("s", [step("a", retry=Retry(max_attempts=0)), step("b", timeout=-1)]),
                Stage("empty", []),
            ],
        )
    problems = "\n".join(info.value.problems)
    assert "max_attempts must be at least 1" in problems
    assert "timeout must be greater than 0" in problems
    assert "stage 'empty' has no steps" in problems


def test_self_dependency() -> None:
    with pytest.raises(DefinitionError, match="depends on itself"):
        LongTask("t", stages=[Stage("s", [step("a", after=["a"])])])


def test_layout_stage_barrier_and_after() -> None:
    task = LongTask(
        "t",
        stages=[
            Stage("s1", [step("a"), step("b")]),
            Stage("s2", [step("c"), step("d", after=["c"])]),
            Stage("s3", [step("e")]),
        ],
    )
    layout = task.layout
    assert layout["a"].depends_on == ()
    assert set(layout["c"].depends_on) == {"a", "b"}
    assert set(layout["d"].depends_on) == {"a", "b", "c"}
    assert set(layout["e"].depends_on) == {"c", "d"}
    assert layout["e"].ancestors == {"a", "b", "c", "d"}
    assert layout["d"].stage == "s2"


def test_layout_ancestors_follow_after_to_later_steps() -> None:
    # "b" waits for "c", defined after it: ancestors are built in dependency order
    task = LongTask(
        "t",
        stages=[
            Stage("s1", [step("a")]),
            Stage("s2", [step("b", after=["c"]), step("c"), step("d")]),
            Stage("s3", [step("e")]),
        ],
    )
    layout = task.layout
    assert set(layout["b"].ancestors) == {"a", "c"}
    assert "d" not in layout["b"].ancestors and "b" not in layout["b"].ancestors
    assert "nope" not in layout["b"].ancestors and 3 not in layout["b"].ancestors
    assert len(layout["e"].ancestors) == 4
    assert sorted(layout["e"].ancestors) == ["a", "b", "c", "d"]
    assert layout["e"].ancestors & {"c", "x"} == {"c"}
    assert {"a", "x"} & layout["b"].ancestors == {"a"}
    assert layout["a"].ancestors == frozenset() and not layout["a"].ancestors


def test_hash_is_stable_and_sensitive_to_structure() -> None:
    def make(after: list[str]) -> LongTask:
        return LongTask(
            "t", stages=[Stage("s", [step("a"), step("b", after=after)]), Stage("z", [step("c")])]
        )

    assert make([]).definition_hash == make([]).definition_hash
    assert make([]).definition_hash != make(["a"]).definition_hash
    renamed = LongTask("t", stages=[Stage("s", [step("a"), step("bb")]), Stage("z", [step("c")])])
    assert renamed.definition_hash != make([]).definition_hash
    other_version = LongTask(
        "t", version="2", stages=[Stage("s", [step("a"), step("b")]), Stage("z", [step("c")])]
    )
    assert other_version.definition_hash != make([]).definition_hash


def test_decorator_forms() -> None:
    @function_step
    def plain(ctx: object) -> int:
        return 1

    @function_step(name="named", after=["plain"], retry=3, timeout=2.5)
    def other(ctx: object) -> int:
        return 2

    assert plain.name == "plain"
    assert other.name == "named"
    assert other.after == ("plain",)
    assert other.retry == Retry(max_attempts=3)
    assert other.timeout == 2.5


def test_retry_waits() -> None:
    r = Retry(max_attempts=5, initial_wait=1, backoff=2, max_wait=5)
    assert [r.wait_before(n) for n in range(2, 6)] == [1, 2, 4, 5]


def test_pause_policies_are_checked() -> None:
    from longtask import approval, wait_for

    with pytest.raises(DefinitionError) as info:
        LongTask(
            "p",
            stages=[
                Stage("a", [step("early")]),
                Stage(
                    "b",
                    [
                        approval("ok", on_reject="early", valid_for=0, approvers=[]),
                        approval("late", on_timeout="skip"),
                        wait_for("hook", on_timeout="reject"),
                        wait_for("hook2", on_timeout="nowhere"),
                    ],
                ),
                Stage("c", [step("after")]),
            ],
        )
    problems = "\n".join(info.value.problems)
    assert "on_reject='early' must name a step in a later stage" in problems
    assert "valid_for must be greater than 0" in problems
    assert "approvers must be a non-empty list" in problems
    assert "an approval cannot be skipped on timeout" in problems
    assert "on_timeout='reject' is only for approvals" in problems
    assert "on_timeout='nowhere' is neither 'fail' nor a step of this task" in problems
    ok = LongTask(
        "p",
        stages=[Stage("b", [approval("ok", on_reject="after")]), Stage("c", [step("after")])],
    )
    assert ok.steps["ok"].kind == "approval"
