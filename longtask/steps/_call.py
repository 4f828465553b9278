"""Which execution of which node is running: the identity event keys are made from."""

from __future__ import annotations

from dataclasses import dataclass

from langchain_core.runnables import RunnableConfig

#: the config key carrying the Runner's run number of a thread (absent: LangGraph's own run)
RUN_KEY = "longtask_run"


@dataclass(frozen=True)
class NodeCall:
    """Identity of one execution of a node, for idempotent event keys."""

    thread_id: str
    run: int
    task_id: str

    @classmethod
    def from_config(cls, config: RunnableConfig) -> NodeCall:
        conf = config.get("configurable") or {}
        ns = str((config.get("metadata") or {}).get("langgraph_checkpoint_ns", ""))
        return cls(
            thread_id=str(conf.get("thread_id")),
            run=int(conf.get(RUN_KEY, 0)),
            task_id=ns.rsplit(":", 1)[-1],
        )

    def key(self, *parts: object) -> str:
        return "/".join(str(p) for p in (self.run, self.task_id, *parts))
