"""LangGraph's own conformance suite (``langgraph-checkpoint-conformance``) against
longtask's saver, on SQLite and on PostgreSQL: every base capability and the extended ones
(copy_thread, delete_for_runs, prune)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from longtask.checkpointers import Database


def test_conformance(db_url: str) -> None:
    db = Database.open(db_url, upgrade=True)

    @checkpointer_test(name=f"longtask-{db.url.scheme}")
    async def factory() -> AsyncIterator[Any]:
        yield db.saver

    try:
        report = asyncio.run(validate(factory))
    finally:
        db.close()
    failures = {
        name: result.failures for name, result in report.results.items() if not result.passed
    }
    assert not failures, failures
    assert {name for name, r in report.results.items() if r.passed} == {
        c.value for c in ALL_CAPABILITIES
    }
    assert report.passed_all_base()
