"""The callable each graph node runs.

No ``from __future__ import annotations`` here: LangGraph reads a node's type hints with
``get_type_hints`` for every node it adds, and string annotations are compiled anew on each
read (~0.15 ms a node: a quarter of compiling a long task).
"""

import inspect
from collections.abc import Callable
from typing import Any

from langchain_core.runnables import RunnableConfig

from longtask.model import StepInfo
from longtask.steps import StepEnv, settled
from longtask.steps._tracing import node_writer, span


class NodeFn:
    """A node callable LangGraph takes as is; one that raises lets its parallel siblings'
    results be saved first (see longtask.steps._siblings).

    For a plain function, LangGraph disassembles its code and closure at compile time,
    looking for subgraphs to wire into the checkpointer (~1 ms per step node here: 0.2 s
    to compile a 200-step task). Our step nodes never hold a subgraph, and a callable
    object is not inspected.
    """

    # LangGraph inspects the signature of every node (to pass it ``config``); computed once
    # here instead of once per node.
    __signature__ = inspect.Signature(
        [
            inspect.Parameter("state", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Any),
            inspect.Parameter(
                "config", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=RunnableConfig
            ),
        ],
        return_annotation=Any,
    )

    def __init__(
        self,
        fn: Callable[[Any, RunnableConfig], Any],
        env: StepEnv,
        info: StepInfo | None = None,
        span_name: str = "longtask.step",
    ) -> None:
        self._fn = settled(env, fn)
        self._env = env
        self.__name__ = getattr(fn, "__name__", "node")
        self._info = info
        self._span = span_name

    def __call__(self, state: Any, config: RunnableConfig) -> Any:
        self._env.adopt_thread(config, state)
        info = self._info
        if info is None:
            return self._fn(state, config)
        # One OpenTelemetry span per node run (a no-op without OpenTelemetry), a child of
        # the Runner's span of the run.
        thread_id = (config.get("configurable") or {}).get("thread_id")
        with (
            span(
                self._span,
                thread_id=thread_id,
                stage=info.stage,
                step=info.name,
                kind=info.kind,
                node=self.__name__,
            ),
            node_writer(),
        ):
            return self._fn(state, config)
