"""A plan's hash (what an approval is bound to) is the same in every process: a plan with a
set, or a pydantic model holding one, no longer hashes its hash-seed-dependent str()."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

from longtask.model._decision import plan_hash

SCRIPT = """
from pydantic import BaseModel
from longtask.model._decision import plan_hash

class Plan(BaseModel):
    tags: set[str]
    title: str

print(plan_hash(Plan(tags={"alpha", "beta", "gamma", "delta", "eps"}, title="x")))
print(plan_hash({"files": {"a.py", "b.py", "c.py", "d.py"}}))
"""


def test_the_hash_of_a_plan_with_sets_is_the_same_under_every_hash_seed() -> None:
    outputs = {
        subprocess.run(
            [sys.executable, "-c", SCRIPT],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3", "4")
    }
    assert len(outputs) == 1, outputs


def test_a_json_plan_keeps_the_hash_it_had() -> None:
    plan = {"steps": ["a", "b"], "risk": {"level": 2, "note": "é"}}
    old = json.dumps(plan, sort_keys=True, separators=(",", ":"), default=str)
    assert plan_hash(plan) == hashlib.sha256(old.encode()).hexdigest()[:16]
