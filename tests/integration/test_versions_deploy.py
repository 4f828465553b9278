"""A deploy while threads are paused, through the CLI in fresh processes as a real deploy
has them: threads start and pause on v1; the code then holds v1 and v2 side by side; the v1
threads resume on v1 (their steps' v1 bodies run), new threads run v2, and
``longtask versions`` counts the live threads on each. ``longtask serve``'s registry serves
one name from several refs in ``longtask.json`` the same way."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import run_cli

from longtask.errors import InvalidInput
from longtask.store import ThreadRecord

V1 = """
from pathlib import Path
from longtask import LongTask, Stage, approval, function_step

LOG = Path(__file__).parent / "ran.log"


def note(what):
    with LOG.open("a") as f:
        f.write(what + "\\n")


def build_v1(ctx):
    note("v1:build")
    return {"built": 1}


def ship_v1(ctx):
    note("v1:ship")
    return {"shipped": "v1", "from": ctx.result("build")}


def v1_task():
    return LongTask(
        "vdeploy",
        [
            Stage("build", [function_step(build_v1, name="build")]),
            Stage("gate", [approval("ok")]),
            Stage("ship", [function_step(ship_v1, name="ship")]),
        ],
        version="1",
    )
"""

V2 = """

def build_v2(ctx):
    note("v2:build")
    return {"built": 2}


def ship_v2(ctx):
    note("v2:ship")
    return {"shipped": "v2", "from": ctx.result("build")}


def announce(ctx):
    note("v2:announce")
    return "announced"


def v2_task():
    return LongTask(
        "vdeploy",
        [
            Stage("build", [function_step(build_v2, name="build")]),
            Stage("gate", [approval("ok")]),
            Stage("ship", [function_step(ship_v2, name="ship"), function_step(announce)]),
        ],
        version="2",
    )
"""


def _write(path: Path, body: str, task: str) -> None:
    path.write_text(textwrap.dedent(body) + f"\n\ntask = {task}\n")


def _ran(tmp_path: Path) -> list[str]:
    log = tmp_path / "ran.log"
    return log.read_text().split() if log.exists() else []


def _ok(proc: object, code: int = 0) -> None:
    assert getattr(proc, "returncode", None) == code, (
        getattr(proc, "stdout", ""),
        getattr(proc, "stderr", ""),
    )


def test_paused_v1_threads_resume_on_v1_while_new_threads_run_v2(
    db_url: str, tmp_path: Path
) -> None:
    mod = tmp_path / "vdeploy.py"
    ref = f"{mod}:task"
    _write(mod, V1, "v1_task()")
    for thread in ("old-1", "old-2"):
        _ok(run_cli("run", ref, "--thread", thread, db=db_url, cwd=tmp_path), 3)
    assert _ran(tmp_path) == ["v1:build", "v1:build"]

    # The deploy: the same module now holds both definitions, newest first.
    _write(mod, V1 + V2, "versions(v2_task(), v1_task())")
    text = mod.read_text().replace(
        "from longtask import LongTask", "from longtask import versions, LongTask"
    )
    mod.write_text(text)

    listed = run_cli("versions", ref, "--json", db=db_url, cwd=tmp_path)
    _ok(listed)
    report = json.loads(listed.stdout)
    by_version = {line["version"]: line for line in report["versions"]}
    assert [line["version"] for line in report["versions"]] == ["2", "1"]
    assert by_version["2"]["newest"] and by_version["2"]["live_total"] == 0
    assert by_version["1"]["live"] == {"waiting_user": 2}
    assert sorted(by_version["1"]["threads"]) == ["old-1", "old-2"]
    assert report["unserved"] == 0

    # A v1 thread resumes on v1: no definition-changed refusal, v1's ship body runs.
    _ok(run_cli("approve", "old-1", "--by", "alice", db=db_url, cwd=tmp_path))
    assert _ran(tmp_path)[-1:] == ["v1:ship"]
    shown = run_cli("result", "old-1", "--json", db=db_url, cwd=tmp_path)
    _ok(shown)
    assert json.loads(shown.stdout)["ship"] == {"shipped": "v1", "from": {"built": 1}}
    status = run_cli("status", "old-1", "--json", db=db_url, cwd=tmp_path)
    _ok(status)
    assert json.loads(status.stdout)["task_version"] == "1"

    # A new thread starts on v2 and runs v2's bodies (and its added step).
    before = len(_ran(tmp_path))
    _ok(run_cli("run", ref, "--thread", "new-1", db=db_url, cwd=tmp_path), 3)
    _ok(run_cli("approve", "new-1", "--by", "alice", db=db_url, cwd=tmp_path))
    assert sorted(_ran(tmp_path)[before:]) == ["v2:announce", "v2:build", "v2:ship"]
    status = run_cli("status", "new-1", "--json", db=db_url, cwd=tmp_path)
    assert json.loads(status.stdout)["task_version"] == "2"

    # The text form names each version and the threads still on v1.
    listed = run_cli("versions", ref, db=db_url, cwd=tmp_path)
    _ok(listed)
    assert "2 versions in the code, 1 live thread" in listed.stdout
    assert "old-2" in listed.stdout and "old-1" not in listed.stdout

    # With v1 gone from the code, its paused thread is listed as not served.
    _write(mod, V1 + V2, "v2_task()")
    listed = run_cli("versions", ref, "--json", db=db_url, cwd=tmp_path)
    _ok(listed)
    report = json.loads(listed.stdout)
    gone = [line for line in report["versions"] if not line["in_code"]]
    assert [(g["version"], g["threads"]) for g in gone] == [("1", ["old-2"])]
    assert report["unserved"] == 1
    text_form = run_cli("versions", ref, db=db_url, cwd=tmp_path)
    assert "not in the code" in text_form.stdout and "longtask check" in text_form.stdout


def test_serve_registry_serves_one_name_from_several_refs(tmp_path: Path) -> None:
    from longtask.serve._registry import load_registry

    (tmp_path / "one.py").write_text(textwrap.dedent(V1) + "\n\ntask = v1_task()\n")
    (tmp_path / "two.py").write_text(
        "from one import *\n" + textwrap.dedent(V2) + "\n\ntask = v2_task()\n"
    )
    config = tmp_path / "longtask.json"
    refs = [f"{tmp_path / 'two.py'}:task", f"{tmp_path / 'one.py'}:task"]
    config.write_text(json.dumps({"tasks": {"vdeploy": refs}}))
    registry = load_registry([], config)
    entry = registry.get("vdeploy")
    assert entry.task.version == "2"
    assert entry.ref == refs[0]  # a new thread records the ref that loads v2
    assert entry.family is not None and [t.version for t in entry.family] == ["2", "1"]
    v1 = entry.family.by_version("1")
    assert v1 is not None
    rec = ThreadRecord(
        thread_id="t",
        task_ref=refs[1],
        task_name="vdeploy",
        task_version="1",
        definition_hash=v1.definition_hash,
        definition={},
        status="waiting",
    )
    assert entry.for_thread(rec) is v1

    # Two refs of one name that hold the same version twice (different code) are refused.
    (tmp_path / "three.py").write_text(
        textwrap.dedent(V1).replace('approval("ok")', 'approval("ok", approvers=["bob"])')
        + "\n\ntask = v1_task()\n"
    )
    three = f"{tmp_path / 'three.py'}:task"
    config.write_text(json.dumps({"tasks": {"vdeploy": [refs[1], three]}}))
    with pytest.raises(InvalidInput, match=r"not versions of one task.*given twice"):
        load_registry([], config)
