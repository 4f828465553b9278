"""An agent step for the crash test of agents (``test_agent_crash.py``).

The agent ``notes`` makes 10 model calls: turns 0, 2, 4, 6 and 8 call ``write_note`` (the
side effect: a line appended to ``$LT_NOTES``), turns 1, 3, 5 and 7 call the read-only
``lookup``, turn 9 answers. (A ReAct agent that makes 10 model calls makes a tool call
after each but the last; five of them have side effects.) ``lookup`` kills its own process
with SIGKILL the first time it runs after the 6th model call (marker file
``$LT_KILL_MARKER``), so the crash lands after the 6th model call's checkpoint.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from longtask import LongTask, Prompt, Stage, agent_step, function_step

TURNS = 10


def write_note(text: str) -> str:
    """Append a note to the notebook."""
    with open(os.environ["LT_NOTES"], "a") as f:
        f.write(text + "\n")
    return f"noted: {text}"


def lookup(topic: str) -> str:
    """Look a topic up (changes nothing)."""
    marker = Path(os.environ["LT_KILL_MARKER"])
    if topic == "topic-5" and not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return f"facts about {topic}"


notes = agent_step(
    "notes",
    prompt=Prompt(name="notes", version="2", template="Take notes on {inputs[subject]}."),
    tools=[write_note, lookup],
    read_only_tools=["lookup"],
)

task = LongTask(
    "agent_notes",
    stages=[
        Stage("research", [notes]),
        Stage(
            "report", [function_step(lambda ctx: {"answer": ctx.result("notes")}, name="report")]
        ),
    ],
)
