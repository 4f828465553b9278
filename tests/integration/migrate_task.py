"""Task versions for tests/integration/test_migrate.py and the ``check`` acceptance test.

``v1`` is what threads were started on; ``v2`` renames ``prep`` to ``prepare``, removes
``old_only`` and adds ``extra``; ``v3`` drops ``prep`` (whose result ``gate`` declared);
``v4`` renames the pending ``gate`` to ``sign_off``; ``v5`` puts a new step before the
pauses. ``ran`` counts each body's calls per version, so a test sees which definition ran a
step."""

from __future__ import annotations

from collections import Counter
from typing import Any

from longtask import LongTask, Stage, StepContext, approval, function_step, versions, wait_for

ran: Counter[str] = Counter()
#: steps whose v1 body raises (a thread that failed on v1)
broken: set[str] = set()


def _prep(ctx: StepContext) -> dict[str, Any]:
    ran["prep@1"] += 1
    return {"artifact": "app-1.tar.gz"}


def _old_only(ctx: StepContext) -> str:
    ran["old_only@1"] += 1
    return "old"


def _ship_v1(ctx: StepContext) -> str:
    ran["ship@1"] += 1
    if "ship" in broken:
        raise RuntimeError("ship is broken in v1")
    return "shipped by v1"


def _prepare(ctx: StepContext) -> dict[str, Any]:
    ran["prepare@2"] += 1
    return {"artifact": "app-1.tar.gz"}


def _ship_v2(ctx: StepContext) -> str:
    ran["ship@2"] += 1
    return "shipped by v2"


def _extra(ctx: StepContext) -> str:
    ran["extra@2"] += 1
    return "extra"


def plan_v1(ctx: StepContext) -> dict[str, Any]:
    return {"ship": ctx.result("prep")["artifact"]}


def plan_v2(ctx: StepContext) -> dict[str, Any]:
    return {"ship": ctx.result("prepare")["artifact"]}


def plan_v2b(ctx: StepContext) -> dict[str, Any]:
    return {"ship": ctx.result("prepare")["artifact"], "channel": "beta"}


def _v1() -> LongTask:
    return LongTask(
        "migrating",
        version="1",
        stages=[
            Stage(
                "build",
                [function_step(_prep, name="prep"), function_step(_old_only, name="old_only")],
            ),
            Stage("decide", [approval("gate", plan=plan_v1, after=["prep"]), wait_for("ci")]),
            Stage("ship", [function_step(_ship_v1, name="ship")]),
        ],
    )


def _v2(version: str = "2", plan: Any = plan_v2, gate: str = "gate") -> LongTask:
    return LongTask(
        "migrating",
        version=version,
        stages=[
            Stage("build", [function_step(_prepare, name="prepare")]),
            Stage("decide", [approval(gate, plan=plan, after=["prepare"]), wait_for("ci")]),
            Stage(
                "ship", [function_step(_ship_v2, name="ship"), function_step(_extra, name="extra")]
            ),
        ],
    )


def _scan(ctx: StepContext) -> str:
    ran["scan@5"] += 1
    return "clean"


def _v5() -> LongTask:
    """v2 with a new step ``scan`` in the first stage: the pauses come after it now."""
    return LongTask(
        "migrating",
        version="5",
        stages=[
            Stage(
                "build",
                [function_step(_prepare, name="prepare"), function_step(_scan, name="scan")],
            ),
            Stage("decide", [approval("gate", plan=plan_v2, after=["prepare"]), wait_for("ci")]),
            Stage("ship", [function_step(_ship_v2, name="ship")]),
        ],
    )


def _v3() -> LongTask:
    return LongTask(
        "migrating",
        version="3",
        stages=[
            Stage("decide", [approval("gate"), wait_for("ci")]),
            Stage("ship", [function_step(_ship_v2, name="ship")]),
        ],
    )


v1 = _v1()
v2 = _v2()
#: v2 with another plan: a pending approval of v1's plan is asked again
v2b = _v2("2b", plan_v2b)
v3 = _v3()
v4 = _v2("4", gate="sign_off")
v5 = _v5()

both = versions(v2, v1)
only_v1 = versions(v1)
only_v2 = versions(v2)
family = versions(v1, v2, v2b, v3, v4, v5)
