"""The CLI's reads of our own tables import no LangGraph or LangChain (issue 29, point 1):
importing them is most of a cold process's time, paid by every `longtask status` a person
or a shell loop polls with. Checked from ``sys.modules`` in a new process after each
command; the times themselves are measured in ``bench/cli.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent.parent
QUICKSTART = f"{ROOT / 'examples' / 'quickstart.py'}:task"
RELEASE = f"{ROOT / 'examples' / 'release.py'}:task"

#: runs the CLI in this process, then prints the heavy modules it imported
_PROBE = """
import sys
from longtask.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted(
    {m.split(".")[0] for m in sys.modules if m.split(".")[0] in ("langgraph", "langchain_core",
     "langchain", "langchain_openai", "openai")}
    | {m for m in sys.modules if m.startswith("longtask.model") or m.startswith("longtask.steps")}
)
print("HEAVY=" + ",".join(heavy))
sys.exit(code)
"""


def _probe(*args: str, db: str) -> tuple[int, str, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        env={**os.environ, "LONGTASK_DB": db},
        capture_output=True,
        text=True,
        timeout=120,
    )
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("HEAVY="), proc.stdout + proc.stderr
    heavy = [m for m in last[len("HEAVY=") :].split(",") if m]
    return proc.returncode, proc.stdout + proc.stderr, heavy


def test_the_reads_import_no_langgraph(db_url: str) -> None:
    made = run_cli("run", QUICKSTART, "--thread", "qs", db=db_url)
    assert made.returncode == 0, made.stdout + made.stderr
    for args in (
        ["--version"],
        ["--help"],
        ["status", "qs"],
        ["status", "qs", "--json"],
        ["ls"],
        ["ls", "--json"],
        ["events", "qs"],
        ["result", "qs"],
        ["result", "qs", "write"],
        ["effects", "qs"],
        ["history", "qs"],
        ["history", "qs", "--json"],
        ["pending", "qs"],
    ):
        code, output, heavy = _probe(*args, db=db_url)
        assert code == 0, (args, output)
        assert heavy == [], (args, heavy)
    # what they print is what the Runner's reads give
    code, output, _ = _probe("status", "qs", db=db_url)
    assert "completed" in output and "(4/4 steps done)" in output
    code, output, _ = _probe("result", "qs", "write", db=db_url)
    assert output.startswith("# Notes on durable execution")


def test_a_read_of_a_missing_thread_says_so_without_langgraph(db_url: str) -> None:
    run_cli("run", QUICKSTART, "--thread", "qs", db=db_url)
    code, output, heavy = _probe("status", "nope", db=db_url)
    assert code == 1 and "no thread 'nope'" in output
    assert heavy == []


def test_pending_of_a_paused_thread_without_langgraph(db_url: str) -> None:
    """A paused thread's pending writes hold LangGraph ``Interrupt`` objects: `pending`
    decodes them without LangGraph, and says what a person must answer."""
    made = run_cli("run", RELEASE, "--thread", "rel", "--input", '{"version": "1.4.0"}', db=db_url)
    assert made.returncode == 3, made.stdout + made.stderr
    for args in (["pending", "rel"], ["pending", "rel", "--json"], ["history", "rel"]):
        code, output, heavy = _probe(*args, db=db_url)
        assert code == 0, (args, output)
        assert heavy == [], (args, heavy)
    code, output, _ = _probe("pending", "rel", "--json", db=db_url)
    from longtask import Runner

    with Runner(db_url) as runner:
        expected = [p.model_dump(mode="json") for p in runner.pending("rel")]
    assert expected, "the release thread waits for something"
    assert json.loads(output[: output.rindex("HEAVY=")]) == expected


@pytest.mark.parametrize("name", ["status", "result", "pending", "history"])
def test_the_reader_gives_what_the_runner_gives(db_url: str, name: str) -> None:
    from longtask import Runner
    from longtask.runtime import Reader

    run_cli("run", QUICKSTART, "--thread", "qs", db=db_url)
    run_cli("run", RELEASE, "--thread", "rel", "--input", '{"version": "1.4.0"}', db=db_url)
    with Runner(db_url) as runner, Reader(db_url) as reader:
        if name == "status":
            assert reader.status("qs").model_dump() == runner.status("qs").model_dump()
        elif name == "pending":
            assert reader.pending("rel") and reader.pending("rel") == runner.pending("rel")
        elif name == "history":
            for tid in ("qs", "rel"):
                assert reader.history(tid) == runner.history(tid)
        else:
            assert reader.results("qs") == runner.results("qs")
            assert reader.result("qs", "outline") == runner.result("qs", "outline")


def test_the_reading_module_names_the_tick_suffix_as_the_model_does() -> None:
    from longtask.model._schedule import TICK_SUFFIX_RE
    from longtask.runtime._reading import _TICK_SUFFIX_RE

    assert _TICK_SUFFIX_RE.pattern == TICK_SUFFIX_RE.pattern
