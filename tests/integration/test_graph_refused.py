"""A graph step's graph that raises on an answer goes back to the same pause (issue 51,
item 4), on both backends, through the Python API and the CLI (the Server API's test is
tests/acceptance/test_graph_refused_serve.py): the thread waits again at the same
interrupt id, the error recorded (``interrupt.refused``) and shown by ``pending`` and
``status``; the answer it raised on is not given again (neither by the next run nor after
a crash); a correct answer afterwards completes the thread. The graphs are plain
LangGraph code (``refused_graph_task.py``) that reads a field of the answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from longtask import Runner
from longtask.runtime._accepted import with_accepted

TASK_FILE = Path(__file__).parent / "refused_graph_task.py"


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "asked.log"
    monkeypatch.setenv("LT_REFUSED_LOG", str(path))
    return path


def _load(name: str) -> Any:
    from longtask.runtime._taskref import load_task

    return load_task(f"{TASK_FILE}:{name}")


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_an_answer_the_graph_raises_on_goes_back_to_the_same_pause(db_url: str, log: Path) -> None:
    task = _load("task")
    with Runner(db_url) as runner:
        thread = runner.start(task, thread_id="t-refused")
        (item,) = runner.pending(thread)
        runner.answer(thread, "blue", task=task, by="ann")
        st = runner.status(thread, usage=False)
        assert st.status == "waiting_user", st.error
        (again,) = runner.pending(thread)
        assert again.interrupt_id == item.interrupt_id
        assert again.request["value"] == {"question": "How big?"}
        assert again.request["refused"].startswith("TypeError: string indices")
        assert "the last answer failed: TypeError" in st.waiting[0]["reason"]
        (refused,) = runner.events(thread, kinds=["interrupt.refused"])
        assert refused.step == "pick"
        assert refused.data == {
            "interrupt_id": item.interrupt_id,
            "type": "TypeError",
            "error": again.request["refused"],
        }
        assert not runner.events(thread, kinds=["step.failed", "longtask.failed"])
        # another wrong answer: refused the same way, with its own error
        runner.answer(thread, {"big": True}, task=task, by="ann")
        (again,) = runner.pending(thread)
        assert again.interrupt_id == item.interrupt_id
        assert again.request["refused"] == "KeyError: 'size'"
        assert len(runner.events(thread, kinds=["interrupt.refused"])) == 2
        # A run with no answer (a crash's, a plain resume) is not given the one the graph
        # raised on: the node asks again.
        assert with_accepted(runner.db, thread, None) is None
        runner.resume(thread, task=task)
        assert runner.status(thread, usage=False).status == "waiting_user"
        assert len(runner.events(thread, kinds=["interrupt.refused"])) == 2
        # each run of the node asks (the answer returned by its interrupt() after that)
        assert _lines(log) == ["ask", "ask", 'took "blue"', "ask", 'took {"big": true}', "ask"]
        # a correct answer completes the thread
        runner.answer(thread, {"size": 3}, task=task, by="bob")
        assert runner.status(thread, usage=False).status == "completed"
        assert runner.result(thread, "pick") == {"size": 6}
        assert len(runner.events(thread, kinds=["interrupt.required"])) == 1
        assert _lines(log)[-2:] == ["ask", 'took {"size": 3}']
        answers = runner.events(thread, kinds=["interrupt.resolved"])
        assert [(e.data["by"], e.data["value"]) for e in answers] == [
            ("ann", "blue"),
            ("ann", {"big": True}),
            ("bob", {"size": 3}),
        ]


def test_an_answer_a_subgraph_raises_on_keeps_the_answers_before_it(db_url: str, log: Path) -> None:
    """The question of a graph a node runs inside itself (as a sub-agent is run): the
    answer to it is taken back, the node's own earlier answer is kept."""
    task = _load("nested")
    with Runner(db_url) as runner:
        thread = runner.start(task, thread_id="t-nested")
        (first,) = runner.pending(thread)
        assert first.request["value"] == {"question": "Which environment?"}
        runner.answer(thread, "prod", task=task, by="ann")
        (item,) = runner.pending(thread)
        assert item.request["value"] == {"question": "How big?"}
        runner.answer(thread, 7, task=task, by="ann")
        assert runner.status(thread, usage=False).status == "waiting_user"
        (again,) = runner.pending(thread)
        assert again.interrupt_id == item.interrupt_id
        assert again.request["refused"].startswith("TypeError")
        runner.answer(thread, {"size": 4}, task=task, by="ann")
        assert runner.status(thread, usage=False).status == "completed"
        assert runner.result(thread, "plan") == {"env": "prod", "size": 8}
        assert _lines(log) == ["ask", "ask", "took 7", "ask", 'took {"size": 4}']


def test_an_error_after_the_answer_was_taken_fails_the_step(db_url: str, log: Path) -> None:
    """The node that asked returned with the answer; a later node raises on it: the
    answer is the graph's state now, and the step fails as on any error."""
    task = _load("late")
    with Runner(db_url) as runner:
        thread = runner.start(task, thread_id="t-late")
        with pytest.raises(Exception, match="string indices"):
            runner.answer(thread, "blue", task=task, by="ann")
        assert runner.status(thread, usage=False).status == "failed"
        assert not runner.events(thread, kinds=["interrupt.refused"])


def test_the_cli_answer_the_graph_raises_on_waits_again_and_says_why(
    db_url: str, log: Path
) -> None:
    from conftest import run_cli

    ref = f"{TASK_FILE}:task"
    env = {"LT_REFUSED_LOG": str(log)}
    assert run_cli("run", ref, "--thread", "t-cli", db=db_url, env=env).returncode == 3
    with Runner(db_url) as runner:
        (item,) = runner.pending("t-cli")
    at = ("--interrupt", item.interrupt_id)
    bad = run_cli("resume", "t-cli", *at, "--resume", '"blue"', db=db_url, env=env)
    assert bad.returncode == 3, bad.stderr
    assert "the last answer failed: TypeError: string indices" in bad.stdout
    shown = run_cli("pending", "t-cli", db=db_url)
    assert shown.returncode == 0, shown.stderr
    assert f"interrupt {item.interrupt_id}" in shown.stdout
    assert "last answer failed: TypeError: string indices" in shown.stdout
    status = run_cli("status", "t-cli", db=db_url)
    assert "the last answer failed: TypeError" in status.stdout
    good = json.dumps({"size": 5})
    done = run_cli("resume", "t-cli", *at, "--resume", good, db=db_url, env=env)
    assert done.returncode == 0, done.stderr
    with Runner(db_url) as runner:
        assert runner.result("t-cli", "pick") == {"size": 10}
        (refused,) = runner.events("t-cli", kinds=["interrupt.refused"])
        assert refused.data["interrupt_id"] == item.interrupt_id
        # asked again in another process: still one question on record
        assert len(runner.events("t-cli", kinds=["interrupt.required"])) == 1
