"""Connections the server closed while they sat idle in the pool (a restart, a pooler's
idle timeout, pg_terminate_backend of all of them) are replaced: the next write and read
go through, however many dead ones the pool held."""

from __future__ import annotations

import psycopg
import pytest
from conftest import PG_ADMIN_URL

from longtask import LongTask, Runner, Stage, function_step
from longtask.checkpointers import Database


@pytest.mark.postgres
def test_every_idle_connection_closed_by_the_server_is_replaced(pg_url: str) -> None:
    db = Database.open(pg_url, upgrade=True)
    try:
        # Fill the pool with several idle connections (held at once, then given back).
        held = [db.pool.getconn() for _ in range(4)]
        for conn in held:
            db.pool.putconn(conn)
        name = pg_url.rsplit("/", 1)[1]
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
        steps = [function_step(lambda ctx, i=i: i, name=f"s{i}") for i in range(3)]
        task = LongTask("re", stages=[Stage(f"st{i}", [s]) for i, s in enumerate(steps)])
        runner = Runner(db=db)
        runner.start(task, {}, thread_id="re-1")
        assert runner.status("re-1").status == "completed"
        assert runner.result("re-1", "s2") == 2
    finally:
        db.close()
