"""Agent steps, prompts and fix loops as definitions (no model, no database)."""

from __future__ import annotations

import pytest

from longtask import DefinitionError, LongTask, Prompt, Stage, agent_step, fix_with, function_step
from longtask.steps._prices import cost_of


def read(path: str) -> str:
    """Read."""
    return path


def test_agent_definition_problems_are_collected() -> None:
    bad = agent_step(
        "bad",
        prompt="x",
        tools=[read, read],
        max_turns=0,
        tool_approvals={"deploy": True},
        read_only_tools=["nope"],
    )
    fixer = agent_step("check", prompt="fix {failure}")
    with pytest.raises(DefinitionError) as err:
        LongTask(
            "t",
            stages=[
                Stage("a", [bad]),
                Stage(
                    "b", [function_step(lambda c: 1, name="check2", on_failure=fix_with(fixer, 0))]
                ),
                Stage("c", [function_step(lambda c: 1, name="check")]),
            ],
        )
    text = str(err.value)
    assert "max_turns must be at least 1" in text
    assert "duplicate tool names ['read']" in text
    assert "name tools it does not have: ['deploy', 'nope']" in text
    assert "max_rounds must be at least 1" in text
    assert "fix agent 'check' has the name of a step" in text


def test_fix_with_needs_an_agent() -> None:
    with pytest.raises(TypeError, match="agent_step"):
        fix_with("fix_tests")  # type: ignore[arg-type]


def test_prompt_versions_change_the_definition_hash() -> None:
    def task(version: str) -> LongTask:
        prompt = Prompt(name="p", version=version, template="Summarise {inputs[topic]}")
        return LongTask("t", stages=[Stage("s", [agent_step("summary", prompt=prompt)])])

    assert task("1").definition_hash == task("1").definition_hash
    assert task("1").definition_hash != task("2").definition_hash
    assert Prompt(name="p", template="{inputs.topic} {analysis[x]}", system="{round}").fields() == {
        "inputs",
        "analysis",
        "round",
    }


def test_prices_match_dated_model_names_and_can_be_overridden() -> None:
    assert cost_of("gpt-4o-mini-2024-07-18", 1_000_000, 0) == pytest.approx(0.15)
    assert cost_of("gpt-4o", 0, 1_000_000) == pytest.approx(10.0)
    assert cost_of("my-local-llama", 10, 10) is None
    assert cost_of("my-local-llama", 1_000_000, 0, {"my-local-llama": (1.0, 2.0)}) == 1.0
