"""Alice's Server API client over graphs served from a langgraph.json written for the test
(``test_graph_store.py``, ``test_lg_stream_modes.py``, ``test_prune_kinds.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from starlette.testclient import TestClient

from longtask import Runner
from longtask.serve import create_app
from longtask.serve._registry import load_registry

HERE = Path(__file__).resolve().parent
ALICE = {"Authorization": "Bearer tok-alice"}


@contextmanager
def served(
    runner: Runner, where: Path, graphs: Mapping[str, str], tasks: Sequence[str] = ()
) -> Iterator[TestClient]:
    """``graphs`` (graph id: file in this folder, whose ``graph`` is served) and ``tasks``
    (LongTask references), served to alice."""
    config = where / "langgraph.json"
    refs = {name: f"{HERE / file}:graph" for name, file in graphs.items()}
    config.write_text(json.dumps({"graphs": refs}))
    registry = load_registry(list(tasks), config)
    app = create_app(
        runner, {"tok-alice": "alice"}, registry=registry, schedule_poll=None, poll=0.02
    )
    with TestClient(app, headers=ALICE) as client:
        yield client
