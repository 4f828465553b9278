"""The one list of event kinds (longtask.store._kinds) holds every kind the code writes:
`longtask events --kind` refuses any other, and the web page subscribes to each."""

from __future__ import annotations

import re
from pathlib import Path

import longtask
from longtask.store._kinds import EVENT_KINDS

SOURCE = Path(longtask.__file__).parent
FAMILIES = (
    "longtask|stage|step|agent\\.run|model|tool|effect|approval|wait|budget|artifact|fix|"
    "manual|compensation|definition|notify|subtask"
)
LITERAL = re.compile(rf'"((?:{FAMILIES})\.[a-z_]+)"')
#: f"{kind}.expired" and the like, where kind is "approval" or "wait"
PAUSE_KIND = re.compile(r'f"\{kind\}\.([a-z_]+)"')
#: dotted names that are not event kinds: loggers, modules, queue tasks, a browser key, a
#: file, OpenTelemetry span names and attributes
NOT_KINDS = re.compile(
    r"longtask\.(runtime|ops|_runner|steps|serve|checkpointers|workers|events|advance|wake|token|db|json"
    r"|run|step|pause|paused|model|model_call|tool_call|metrics)$"
)


def test_every_kind_the_code_writes_is_listed() -> None:
    written: set[str] = set()
    for path in SOURCE.rglob("*.py"):
        if path.name == "_kinds.py" or "demo/sample" in path.as_posix():
            continue
        text = path.read_text()
        written |= {k for k in LITERAL.findall(text) if not NOT_KINDS.match(k)}
        for suffix in PAUSE_KIND.findall(text):
            written |= {f"approval.{suffix}", f"wait.{suffix}"}
    assert written, "the scan found no kinds: its pattern is out of date"
    assert sorted(written - set(EVENT_KINDS)) == []
    assert len(set(EVENT_KINDS)) == len(EVENT_KINDS)
