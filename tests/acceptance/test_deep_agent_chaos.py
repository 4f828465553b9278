"""Random SIGKILLs of a LangChain deep agent run unchanged as a graph step (both backends):
no tool call committed twice, no answered model turn asked again, every thread completes
with the outside state of a run without kills.

``deep_agent_task.py`` is the agent (``create_deep_agent``: a sub-agent with its own
side-effecting tools, two tool calls in one turn, a tool behind ``interrupt_on``), its
side-effecting tools writing to an outside SQLite database with their ``tool_call_id``,
which the graph step's reconcile looks up. ``deep_chaos_driver.py`` (a subprocess) forks
one child per run, kills it at random (and, once per side-effecting tool, right after the
tool's outside commit), approves the refund as a person, and prints its figures; the
scripted model server runs here and logs every request.

``LT_CHAOS_SEED`` sets the driver's seed; timing makes every run differ. The larger run
(``LT_DEEP_KILLS``, 240 by default) is behind the slow marker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import deep_agent_task as d
import pytest
from fakes import FakeOpenAI

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "deep_chaos_driver.py"
SEED = int(os.environ.get("LT_CHAOS_SEED", "5151"))


def _drive(db_url: str, tmp_path: Path, kills: int, budget: float) -> dict[str, Any]:
    outside, log = tmp_path / "outside.db", tmp_path / "requests.jsonl"
    with FakeOpenAI(d.script, log_path=log) as server:
        env = {
            **os.environ,
            "OPENAI_API_KEY": "sk-test-deep-chaos",
            "OPENAI_BASE_URL": server.base_url,
            # widens the windows around each tool's outside commit a little
            "LT_TOOL_SLEEP": "0.02",
        }
        args = ["--db", db_url, "--outside", str(outside), "--log", str(log)]
        args += ["--kills", str(kills), "--seed", str(SEED), "--budget", str(budget)]
        proc = subprocess.run(
            [sys.executable, str(DRIVER), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=budget + 300,
        )
        assert server.script_errors == [], server.script_errors
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\ndeep agent chaos figures: {json.dumps(figures)}")
    return figures


def _check(figures: dict[str, Any], kills: int) -> None:
    assert figures["errors"] == [], figures["errors"]
    assert figures["violations"] == [], figures["violations"]
    # (a tool killed at its chosen point may add a few once the random kills are done)
    assert figures["kills"] >= kills
    # each side-effecting tool, the sub-agent's among them, was killed right after its
    # outside commit, and the cut-off call was settled by the reconcile
    aimed = figures["aimed_kills"]
    for tool in d.SIDE_EFFECTS:
        assert aimed.get(f"{tool}:after -> {tool}: after its outside commit") == 1, aimed
        assert figures["reconciled"].get(f"tool:{tool}", 0) >= 1, figures
    assert figures["kills_in_subagent"] > 0, figures
    # every thread's approval was answered by the driver (once, or again after a kill before
    # the answer was accepted)
    assert figures["answers"] >= figures["threads"], figures


def test_random_kills_of_a_deep_agent(db_url: str, tmp_path: Path, record_property: Any) -> None:
    # about 30-60 s per backend; the budget only stops a run that hangs
    figures = _drive(db_url, tmp_path, kills=30, budget=240)
    record_property("figures", json.dumps(figures))
    _check(figures, 30)


@pytest.mark.slow
def test_many_random_kills_of_a_deep_agent(
    db_url: str, tmp_path: Path, record_property: Any, request: pytest.FixtureRequest
) -> None:
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("240 kills: run with -m slow")
    kills = int(os.environ.get("LT_DEEP_KILLS", "240"))
    figures = _drive(db_url, tmp_path, kills=kills, budget=1200)
    record_property("figures", json.dumps(figures))
    _check(figures, kills)
