"""Effect keys are the same in every process: a set, a dict built in another order and a
pydantic model, hashed by two processes with different ``PYTHONHASHSEED``, give one key and
one outside call across a crash (see ``effect_args_task.py``)."""

from __future__ import annotations

import time
from pathlib import Path

import effect_args_task
from conftest import run_cli

from longtask import Runner

HERE = Path(__file__).resolve().parent
REF = f"{HERE / 'effect_args_task.py'}:task"


def test_one_key_and_one_call_across_hash_seeds(db_url: str, tmp_path: Path) -> None:
    service = tmp_path / "service.db"
    env = {"LT_SERVICE_DB": str(service), "LT_CRASH_MARKER": str(tmp_path / "crashed")}
    first = run_cli("run", REF, "--thread", "seeds", db=db_url, env={**env, "PYTHONHASHSEED": "1"})
    assert first.returncode == 1, first.stdout + first.stderr
    assert (tmp_path / "crashed").exists(), first.stderr
    [key] = effect_args_task.service_calls(service)
    deadline = time.monotonic() + 10
    with Runner(db_url) as runner:
        while runner.status("seeds").active and time.monotonic() < deadline:
            time.sleep(0.05)

    resumed = run_cli(
        "resume", "seeds", db=db_url, env={**env, "PYTHONHASHSEED": "2", "LT_REVERSE": "1"}
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert effect_args_task.service_calls(service) == [key]
    with Runner(db_url) as runner:
        [row] = runner.effects("seeds")
        assert (row.key, row.status, row.calls) == (key, "succeeded", 1)
        assert runner.result("seeds", "pay")["key"] == key
