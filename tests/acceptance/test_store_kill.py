"""A store write and a kill (both backends): a graph step's node writes to LangGraph's
store and the process is SIGKILLed before the node returns (``store_kill_task.py``). The
write committed at once, outside the node's checkpoint; ``longtask resume`` runs the node
again from its start, and the node finds the write its cut-off run made: one item under
its key, written twice, as docs/howto/langgraph.md says."""

from __future__ import annotations

from pathlib import Path

from conftest import run_cli

from longtask import Runner

TASK = Path(__file__).resolve().parent / "store_kill_task.py"


def test_a_node_cut_off_after_a_store_write_finds_it_when_run_again(
    db_url: str, tmp_path: Path
) -> None:
    env = {"LT_CRASH_MARKER": str(tmp_path / "crashed")}
    first = run_cli("run", f"{TASK}:task", "--thread", "store-kill", db=db_url, env=env)
    assert first.returncode == -9, first.stdout + first.stderr  # SIGKILL
    second = run_cli("resume", "store-kill", db=db_url, env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    with Runner(db_url) as runner:
        # the re-run found the cut-off run's write, and wrote over it
        assert runner.result("store-kill", "noting") == {"found": {"runs": 1}, "wrote": 2}
        items = runner.db.graph_store.search(("notes",))
        assert [(i.key, i.value) for i in items] == [("the-note", {"runs": 2})]
