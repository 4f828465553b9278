"""A ledger write and its event commit together (every backend).

The ledger's ``started`` row commits on its own, before the outside call; its
``effect.started`` event must commit in that same transaction, or a process killed between
the two would keep the row and lose its record (the event crash test,
``tests/acceptance/test_events_chaos.py``, saw exactly that on PostgreSQL). Here the event's
insert is made to fail with a trigger: the row must not commit without it, and the outside
call must not happen. Likewise for ``effect.succeeded``: the call happened, but the ledger
does not record it as succeeded without its event.
"""

from __future__ import annotations

from typing import Any

import pytest

from longtask import LongTask, Retry, Runner, Stage, StepContext, function_step


def _refuse(runner: Runner, kind: str) -> None:
    """Make the database refuse to store events of ``kind``."""
    if runner.db.url.scheme == "sqlite":
        runner.db.store._run(
            f"CREATE TRIGGER refuse_event BEFORE INSERT ON longtask_events "
            f"WHEN NEW.kind = '{kind}' BEGIN SELECT RAISE(ABORT, 'event refused'); END"
        )
    else:
        runner.db.store._run(
            "CREATE FUNCTION refuse_event() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF NEW.kind = '{kind}' THEN RAISE EXCEPTION 'event refused'; END IF; "
            "RETURN NEW; END $$"
        )
        runner.db.store._run(
            "CREATE TRIGGER refuse_event BEFORE INSERT ON longtask_events "
            "FOR EACH ROW EXECUTE FUNCTION refuse_event()"
        )


def _task(calls: list[str]) -> LongTask:
    def charge(idempotency_key: str) -> dict[str, Any]:
        calls.append(idempotency_key)
        return {"charged": 1}

    @function_step(retry=Retry(max_attempts=1))
    def pay(ctx: StepContext) -> Any:
        return ctx.effect("charge", charge)

    return LongTask("pay_events", stages=[Stage("pay", [pay])])


@pytest.mark.parametrize("kind", ["effect.started", "effect.succeeded"])
def test_a_ledger_row_never_commits_without_its_event(runner: Runner, kind: str) -> None:
    calls: list[str] = []
    _refuse(runner, kind)
    with pytest.raises(Exception, match="event refused"):
        runner.start(_task(calls), {}, thread_id=f"t-{kind}")
    rows = runner.effects(f"t-{kind}")
    stored = {e.kind for e in runner.events(f"t-{kind}")}
    if kind == "effect.started":
        # neither the row nor its event: and so no outside call either
        assert rows == [] and calls == [], (rows, calls)
    else:
        # the call happened and its start is recorded; its success is not, without its event
        assert len(calls) == 1 and [r.status for r in rows] == ["started"], rows
        assert "effect.started" in stored
    assert kind not in stored
