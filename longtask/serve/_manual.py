"""Taking over by hand through the HTTP API: retry a failed step, skip one with a given
result, and read a thread's final results.

A retry or skip is checked in the request with the Runner's own checks (``retry_target``,
``check_skip``) and recorded as a run that serve's executor carries out, as an approval is:
no request runs a step. A thread served by workers gets the Runner's call at once, which
only queues the continuation for them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import longtask.serve.lgapi._runs as lg_runs
from longtask.runtime._text import refuse_bad_text
from longtask.serve._registry import assistant_id

if TYPE_CHECKING:
    from longtask.serve.lgapi._common import Api


def retry_later(api: Api, thread_id: str, step: str | None, by: str) -> str | None:
    """Check a retry now and record it as a run; returns the run id (None: queued for the
    workers)."""
    runner = api.runner
    rec = runner.reads.thread(thread_id)
    if runner.served_by_workers(rec):
        runner.retry(thread_id, step, by=by)
        return None
    seen = lg_runs.refuse_busy(api, thread_id)
    rec = runner.reads.thread(thread_id)  # read after the mark: what the check sees is current
    failing = runner.retry_target(rec, step)
    request = {"kind": "retry", "step": failing}
    return lg_runs.record(
        api, thread_id, assistant_id(rec.task_name), request, by, seen=seen
    ).run_id


def skip_later(api: Api, thread_id: str, step: str, result: Any, by: str) -> str | None:
    """Check a skip now and record it as a run; returns the run id (None: queued for the
    workers)."""
    runner = api.runner
    rec = runner.reads.thread(thread_id)
    if runner.served_by_workers(rec):
        runner.skip(thread_id, step, result, by=by)
        return None
    seen = lg_runs.refuse_busy(api, thread_id)
    rec = runner.reads.thread(thread_id)
    entry = api.registry.find(rec.task_name)
    task = entry.for_thread(rec) if entry is not None else runner.engine.load(rec)
    refuse_bad_text(result, "the result")  # JSON may hold text the database cannot store
    # The result passes the checks of every outside value (a reference must resolve).
    runner.check_skip(rec, task, step, result)
    request = {"kind": "skip", "step": step, "result": result}
    return lg_runs.record(
        api, thread_id, assistant_id(rec.task_name), request, by, seen=seen
    ).run_id


def final_results(api: Api, thread_id: str, every: bool) -> dict[str, Any]:
    """What ``longtask result`` prints: a completed thread's last-stage results (``every``:
    all of them); before it completes, every result so far. Values as JSON."""
    from longtask.serve._http import jsonable

    runner = api.runner
    st = runner.status(thread_id)
    found = runner.results(thread_id)
    final = st.status == "completed" and not every
    last = st.steps[-1].stage if st.steps else None
    chosen = [s.name for s in st.steps if not final or s.stage == last]
    return {
        "status": st.status,
        "final": final,
        "results": {name: _json(jsonable(found[name])) for name in chosen if name in found},
    }


def _json(value: Any) -> Any:
    """``value`` as JSON can carry it: a result the codec decoded to another type (a
    datetime, a set, a model it cannot rebuild) as its text."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, default=str))
