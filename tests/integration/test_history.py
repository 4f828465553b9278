"""Time travel against every backend: history, the state at a checkpoint, diffs, forks and
branches, with the effect ledger keeping a fork from repeating effects."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from longtask import InvalidInput, LongTask, Runner, Stage, StepContext, function_step

CALLS: list[tuple[str, Any]] = []


def charge(amount: int, idempotency_key: str) -> dict[str, Any]:
    CALLS.append(("charge", amount))
    return {"charged": amount}


def notify(channel: str, idempotency_key: str) -> str:
    CALLS.append(("notify", channel))
    return f"sent to {channel}"


@function_step
def price(ctx: StepContext) -> int:
    return int(ctx.inputs["base"]) * 2


@function_step
def pay(ctx: StepContext) -> Any:
    return ctx.effect("charge", charge, ctx.result("price"))


@function_step
def tell(ctx: StepContext) -> Any:
    return ctx.effect("notify", notify, "#billing")


@function_step
def receipt(ctx: StepContext) -> str:
    return f"paid {ctx.result('pay')['charged']}"


TASK = LongTask(
    "billing",
    stages=[
        Stage("quote", [price]),
        Stage("charge", [pay]),
        Stage("tell", [tell]),
        Stage("end_", [receipt]),
    ],
)


def test_fork_with_a_changed_result(runner: Runner) -> None:
    CALLS.clear()
    thread = runner.start(TASK, {"base": 10}, thread_id="t-fork")
    assert runner.result(thread, "receipt") == "paid 20"
    assert CALLS == [("charge", 20), ("notify", "#billing")]
    original_head = runner.history(thread, limit=1)[0].checkpoint_id
    after_price = next(v for v in runner.history(thread, limit=50) if v.completed == ["price"])

    new = runner.fork(thread, after_price.checkpoint_id, update={"price": 35}, by="ana", task=TASK)
    runner.resume(thread, task=TASK)
    assert runner.result(thread, "receipt") == "paid 35"
    # the charge had new arguments: called once more; the notice had the same: not again
    assert CALLS == [("charge", 20), ("notify", "#billing"), ("charge", 35)]

    branches = runner.branches(thread)
    assert len(branches) == 2
    current = next(b for b in branches if b.current)
    assert current.forked_from == after_price.checkpoint_id
    old = next(b for b in branches if not b.current)
    assert old.head == original_head and old.forked_from is None
    # the original branch is untouched
    assert runner.at(thread, original_head, task=TASK).results["receipt"] == "paid 20"
    first_of_fork = runner.at(thread, new, task=TASK)
    assert first_of_fork.results["price"] == 35 and first_of_fork.next == ["pay"]
    changes = {d.step: d for d in runner.diff(thread, original_head, current.head, task=TASK)}
    assert changes["price"].before == 20 and changes["price"].after == 35
    assert changes["receipt"].after == "paid 35"
    assert "tell" not in changes
    (fork_event,) = runner.events(thread, kinds=["manual.fork"])
    assert fork_event.data["by"] == "ana" and fork_event.data["steps"] == ["price"]


def test_fork_refuses_bad_input_and_changes_nothing(runner: Runner) -> None:
    CALLS.clear()
    thread = runner.start(TASK, {"base": 1}, thread_id="t-fork-bad")
    head = runner.history(thread, limit=1)[0].checkpoint_id
    with pytest.raises(InvalidInput, match="not a step"):
        runner.fork(thread, head, update={"nope": 1}, task=TASK)
    with pytest.raises(InvalidInput, match="no checkpoint"):
        runner.fork(thread, "1f0-not-a-checkpoint", update={"price": 1}, task=TASK)
    with pytest.raises(InvalidInput, match="say what changes"):
        runner.fork(thread, head, task=TASK)
    assert len(runner.branches(thread)) == 1
    assert runner.status(thread).status == "completed"


def test_history_filters_by_step_and_stage(runner: Runner) -> None:
    thread = runner.start(TASK, {"base": 3}, thread_id="t-hist")
    assert [v.completed for v in runner.history(thread, 5, step="pay")] == [["pay"]]
    assert [v.completed for v in runner.history(thread, 5, stage="end_")] == [["receipt"]]
    with pytest.raises(InvalidInput, match="no step"):
        runner.history(thread, 5, step="nope")
    page = runner.history(thread, 2)
    older = runner.history(thread, 2, before=page[-1].checkpoint_id)
    assert older[0].checkpoint_id == page[-1].parent_id
    # Issue 28, item 12: an unknown --before was ignored (the newest page came back).
    with pytest.raises(InvalidInput, match="has no checkpoint 'bogus'"):
        runner.history(thread, 2, before="bogus")
    assert "<table" in page._repr_html_()  # type: ignore[attr-defined]


def test_history_reads_a_bounded_number_of_rows(tmp_path: Path) -> None:
    """2,000 checkpoints; history(limit=20) reads 20 of them (SQLite statement trace)."""

    task = LongTask(
        "long",
        stages=[Stage(f"s{i}", [function_step(lambda c, i=i: i, name=f"n{i}")]) for i in range(40)],
    )
    url = f"sqlite:///{tmp_path / 'long.db'}"
    with Runner(url) as runner:
        threads = [runner.start(task, thread_id=f"t{i}") for i in range(1)]
        graph = runner.graph(task)
        # Pad the history: fork the same checkpoint over and over (cheap checkpoints).
        head = runner.history(threads[0], 1)[0].checkpoint_id
        for _ in range(1960):
            graph.update_state(
                {
                    "configurable": {
                        "thread_id": threads[0],
                        "checkpoint_ns": "",
                        "checkpoint_id": head,
                    }
                },
                {"out.n0": 1},
                as_node="n0",
            )
        total = len(runner.db.store.checkpoint_tree(threads[0]))
        assert total >= 2000
        conn: sqlite3.Connection = runner.db.store._conn  # type: ignore[attr-defined]
        rows_read: list[str] = []
        conn.set_trace_callback(rows_read.append)
        try:
            views = runner.history(threads[0], limit=20)
        finally:
            conn.set_trace_callback(None)
        assert len(views) == 20
        selects = [s for s in rows_read if s.lstrip().upper().startswith("SELECT")]
        checkpoint_reads = [
            s for s in selects if s.lstrip().startswith("SELECT thread_id, checkpoint_ns")
        ]
        assert len(checkpoint_reads) == 1 and "LIMIT 20" in checkpoint_reads[0]
        # the checkpoints and the lines of their deltas: no values, no writes
        assert len(selects) <= 3, selects
        assert not [s for s in selects if "longtask_cp_values" in s or "cp_writes" in s]


def test_timeline_and_graph_render_to_png(runner: Runner, tmp_path: Path) -> None:
    from longtask import draw_graph

    CALLS.clear()
    thread = runner.start(TASK, {"base": 2}, thread_id="t-plot")
    figure = runner.timeline(thread)
    bars = [p for p in figure.axes[0].patches if p.get_width() > 0]
    assert len(bars) == 4  # one run of each of the four steps
    labels = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert labels == ["price", "pay", "tell", "receipt"]
    figure.savefig(tmp_path / "timeline.png")
    assert (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    picture = draw_graph(TASK)
    texts = {t.get_text().split("\n")[0] for t in picture.axes[0].texts}
    assert {"quote", "charge", "price", "pay", "receipt"} <= texts
    picture.savefig(tmp_path / "graph.png")
    assert (tmp_path / "graph.png").stat().st_size > 1000


def test_fork_asks_again_only_when_the_approved_plan_changed(runner: Runner) -> None:
    from longtask import approval

    @function_step
    def memo(ctx: StepContext) -> str:
        return "memo"

    gate = approval("gate", plan=lambda ctx: {"amount": ctx.result("price")})
    task = LongTask(
        "gated",
        stages=[
            Stage("quote", [price, memo]),
            Stage("ok", [gate]),
            Stage("done", [function_step(lambda ctx: "paid", name="finish")]),
        ],
    )
    thread = runner.start(task, {"base": 5}, thread_id="t-gate-fork")
    (pending,) = runner.pending(thread, task=task)
    runner.approve(thread, "gate", by="ana", task=task)
    assert runner.status(thread).status == "completed"
    # fork at the end of the approval: the steps after a changed result run again
    after_gate = next(v for v in runner.history(thread, 50) if "gate" in v.completed)
    # a change the plan does not depend on: the approval of the same plan still counts
    runner.fork(thread, after_gate.checkpoint_id, update={"memo": "other"}, task=task)
    runner.resume(thread, task=task)
    assert runner.status(thread).status == "completed"
    reused = runner.events(thread, kinds=["approval.resolved"])[-1]
    assert reused.data.get("reused") is True and reused.data["by"] == "ana"
    # a change of the plan itself: a fresh approval is requested
    runner.fork(thread, after_gate.checkpoint_id, update={"price": 99}, task=task)
    runner.resume(thread, task=task)
    assert runner.status(thread).status == "waiting_user"
    (again,) = runner.pending(thread, task=task)
    assert again.request["plan"] == {"amount": 99}
    assert again.request["plan_hash"] != pending.request["plan_hash"]
