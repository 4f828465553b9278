"""The callable each graph node runs.

No ``from __future__ import annotations`` here: LangGraph reads a node's type hints with
``get_type_hints`` for every node it adds, and string annotations are compiled anew on each
read (~0.15 ms a node: a quarter of compiling a long task).
"""

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

try:
    from langgraph._internal._constants import CONFIG_KEY_READ
except ImportError:  # pragma: no cover - LangGraph moved it; its value has not changed
    CONFIG_KEY_READ = "__pregel_read"

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
        state = LazyState(state, config, self._env.channels)
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


class LazyState(Mapping[str, Any]):
    """The graph's state as a node's task sees it (the channels at the start of its
    super-step), each channel read when first asked for.

    A node is compiled to read only the task's inputs (see ``graphs._compile``): LangGraph
    reads a node's input channels for every task it prepares, and compiles each node with
    its list of them, so nodes reading the whole state made every step and the compile cost
    grow with the number of steps. What a step reads (its dependencies' results, a pause's
    answer, a fix loop's round) is read here through the task's own reader, LangGraph's
    ``CONFIG_KEY_READ``, which gives the same values the input would have.
    """

    __slots__ = ("_absent", "_names", "_read", "_values")

    def __init__(
        self, given: Mapping[str, Any], config: RunnableConfig, names: frozenset[str]
    ) -> None:
        self._values: dict[str, Any] = dict(given)
        conf = config.get("configurable") or {}
        self._read: Callable[..., dict[str, Any]] | None = conf.get(CONFIG_KEY_READ)
        #: the graph's state channels (what may be read)
        self._names = names
        self._absent: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            pass
        if self._read is None or key in self._absent or key not in self._names:
            raise KeyError(key)
        got = self._read([key], False)
        if key not in got:  # an empty channel, as in a node's input
            self._absent.add(key)
            raise KeyError(key)
        self._values[key] = value = got[key]
        return value

    def __iter__(self) -> Iterator[str]:
        if self._read is not None:
            names = [n for n in self._names if n not in self._values and n not in self._absent]
            if names:
                self._values.update(self._read(names, False))
                self._absent.update(n for n in names if n not in self._values)
        return iter(list(self._values))

    def __len__(self) -> int:
        return sum(1 for _ in self)
