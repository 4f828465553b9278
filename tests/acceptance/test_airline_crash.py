"""Crash harness for an unchanged LangChain agent whose tools write to an outside system
(issue 51): the airline agent of ``airline_agent.py`` (``create_agent`` over ``ChatOpenAI``
against the scripted model; ``book_flight`` and ``cancel_booking`` write to the airline's
SQLite database, each logging its ``tool_call_id`` in the transaction of its write;
``lookup`` reads), run as a graph step (``airline_task.py``: marks in
``graph_step(tools=...)``) and served from a ``langgraph.json`` by ``longtask serve``
(marks in the graph's entry, ``"tools"``), on both backends. Every other thread runs the
same agent with coroutine tools (served with its marks in the tools' metadata,
``airline_served.py``).

``airline_driver.py`` (a subprocess) SIGKILLs the process running the agent at random
points, including between a tool's commit in the airline's database and its return, and
resumes each thread until it completes. Afterwards:

- no ``tool_call_id`` is in the airline's database twice (no call committed twice);
- every thread completed, with the same bookings, refunds and logged calls as the thread
  run without kills, and the same result;
- every call killed between its commit and its return was settled by the reconciler
  (found in the airline's database by its ``tool_call_id``), and no thread paused.

18 kills per backend here (12 of the graph step, 6 of serve);
``test_airline_crash_200_kills`` (``-m slow``) makes 300 per backend (200 and 100).

Each trip (one thread; the passenger's name is the thread's id) is four model turns: a
``lookup`` and a booking at once; two bookings at once; a cancellation of the first
booking (its reference read from the tool's answer) and a ``lookup``; the summary of every
tool's answer (the step's result).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeOpenAI, Reply, Request

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "airline_driver.py"
SEED = int(os.environ.get("LT_CHAOS_SEED", "5101"))


def script(request: Request) -> Reply:
    """The model: a trip for the passenger named in the prompt, turn by turn."""
    found = re.search(r"passenger (\S+)\.", request.first_text("user"))
    assert found is not None, request.first_text("user")
    p = found.group(1)
    answers = [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]
    if request.turn == 0:
        return Reply.tool_calls(
            [("lookup", {"flight": "LT101"}), ("book_flight", {"passenger": p, "flight": "LT101"})]
        )
    if request.turn == 1:
        return Reply.tool_calls(
            [
                ("book_flight", {"passenger": p, "flight": "LT202"}),
                ("book_flight", {"passenger": p, "flight": "LT303"}),
            ]
        )
    if request.turn == 2:
        booked = next(a for a in answers if a.startswith("booked ") and a.endswith("/LT101"))
        return Reply.tool_calls(
            [
                ("cancel_booking", {"ref": booked.removeprefix("booked ")}),
                ("lookup", {"flight": "LT202"}),
            ]
        )
    return Reply.text("Trip planned: " + " | ".join(answers))


def drive(
    db_url: str, tmp_path: Path, plan: dict[str, int], record_property: Any, budget: float
) -> dict[str, dict[str, Any]]:
    """Run the driver over ``plan`` (kills per mode); its figures by mode."""
    with FakeOpenAI(script) as model:
        proc = subprocess.run(
            [
                sys.executable,
                str(DRIVER),
                *("--db", db_url, "--airline", str(tmp_path / "airline.db")),
                *("--plan", ",".join(f"{mode}:{n}" for mode, n in plan.items())),
                *("--seed", str(SEED), "--budget", str(budget)),
            ],
            env={**os.environ, "OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "sk-airline"},
            capture_output=True,
            text=True,
            timeout=len(plan) * budget + 300,
        )
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        assert model.script_errors == [], model.script_errors
    found: list[dict[str, Any]] = json.loads(proc.stdout.strip().splitlines()[-1])
    for figures in found:
        shown = {k: v for k, v in figures.items() if k != "result"}
        print(f"\nairline crash figures: {json.dumps(shown)}")
        # shown in the run's summary too, also under xdist (see conftest.py)
        record_property("figures", json.dumps(shown))
    return {f["mode"]: f for f in found}


def check(figures: dict[str, Any], kills: int) -> None:
    assert figures["errors"] == [], figures["errors"]
    assert figures["violations"] == [], figures["violations"]
    assert figures["kills"] == kills
    assert figures["duplicates"] == 0
    assert figures["completed"] == figures["threads"] >= 2
    # kills landed after a tool's commit, before its return: each such call was reconciled
    cut = figures["kills_by_phase"].get("commit_to_return", 0)
    assert figures["reconciled"] >= cut > 0, figures
    assert figures["result"] == (
        "Trip planned: LT101: AMS 08:05 -> LIS 10:40 | booked P/LT101 | booked P/LT202 | "
        "booked P/LT303 | cancelled P/LT101, refunded 120 | LT202: LIS 14:10 -> MAD 16:20"
    )


#: kills per mode in the suite (36 on the two backends; about a minute each on two cores)
PLAN = {"step": 12, "serve": 6}


def test_random_kills_never_commit_a_tool_call_twice(
    db_url: str, tmp_path: Path, record_property: Any
) -> None:
    found = drive(db_url, tmp_path, PLAN, record_property, budget=90)
    for mode, kills in PLAN.items():
        check(found[mode], kills)


@pytest.mark.slow
def test_airline_crash_200_kills(
    db_url: str, tmp_path: Path, record_property: Any, request: pytest.FixtureRequest
) -> None:
    """The long run: 300 kills per backend, 200 of the graph step and 100 of serve."""
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("the 200-kill run: run with -m slow")
    plan = {"step": 200, "serve": 100}
    found = drive(db_url, tmp_path, plan, record_property, budget=1800)
    for mode, kills in plan.items():
        check(found[mode], kills)
