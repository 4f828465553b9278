"""The notebooks in ``notebooks/`` run top to bottom in a real Jupyter kernel, as a reader
would run them. Their cells assert what the text around them says, so a notebook that runs
but shows the wrong thing fails here; this test also checks what they display (HTML
tables, PNG pictures) and the files they leave behind.

The kernel is this interpreter (``sys.executable``), whatever kernelspecs the machine has:
the test writes its own ``python3`` kernelspec to a temporary directory and puts it first on
``JUPYTER_PATH``. (The spec that ipykernel's wheel installs runs ``python`` from ``$PATH``,
which need not be the virtualenv that has longtask; and CI never registers one.) The
kernel's working directory is the test's ``tmp_path``: the embedded SQLite database
``.longtask/longtask.db`` and the notebooks' scratch files land there, never in the repo.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = ["01_quickstart", "02_human_in_the_loop", "03_time_travel"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@pytest.fixture
def kernel(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``python3`` kernelspec that starts this interpreter, first on JUPYTER_PATH; no user
    IPython profile; no ``$LONGTASK_DB`` (the notebooks use the embedded SQLite default)."""
    root = tmp_path_factory.mktemp("jupyter")
    spec_dir = root / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (longtask tests)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(root))
    monkeypatch.setenv("IPYTHONDIR", str(root / "ipython"))
    monkeypatch.delenv("LONGTASK_DB", raising=False)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    assert KernelSpecManager().get_kernel_spec("python3").argv[0] == sys.executable


def _execute(name: str, tmp_path: Path) -> nbformat.NotebookNode:
    """Run notebook ``name`` in ``tmp_path``; fail with the failing cell and its error."""
    path = tmp_path / f"{name}.ipynb"
    shutil.copyfile(NOTEBOOKS / path.name, path)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    error: CellExecutionError | None = None
    try:
        client.execute()
    except CellExecutionError as exc:
        error = exc
    finally:
        # the executed copy, outputs included, for a look after a failure
        nbformat.write(nb, tmp_path / f"{name}.executed.ipynb")
    if error is not None:
        failed = next(
            (
                f"cell {i} (id {cell.get('id')})"
                for i, cell in enumerate(nb.cells, 1)
                if any(o.output_type == "error" for o in cell.get("outputs", []))
            ),
            "a cell",
        )
        pytest.fail(f"{path.name}: {failed} raised:\n{ANSI.sub('', str(error))}", pytrace=False)
    return nb


def _shown(nb: nbformat.NotebookNode, mime: str) -> list[Any]:
    """Every rich output of type ``mime`` the notebook displayed, in order."""
    return [
        output["data"][mime]
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if mime in output.get("data", {})
    ]


def _code_cells(name: str) -> Iterator[nbformat.NotebookNode]:
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    return (cell for cell in nb.cells if cell.cell_type == "code")


@pytest.mark.usefixtures("kernel")
def test_quickstart_notebook(tmp_path: Path) -> None:
    nb = _execute("01_quickstart", tmp_path)
    assert (tmp_path / ".longtask" / "longtask.db").is_file()
    # the timeline renders to PNG: saved by the notebook, and shown under its cell
    assert (tmp_path / "timeline.png").read_bytes()[:8] == PNG_SIGNATURE
    # the graph, the timeline, and the priced thread's timeline and cost chart
    assert len(_shown(nb, "image/png")) == 4
    report = (tmp_path / "report.html").read_text()
    assert report.count("data:image/png;base64,") == 2 and "priced_notes" in report
    tables = [html for html in _shown(nb, "text/html") if "<table" in html]
    assert len(tables) == 1 and "completed" in tables[0] and "research" in tables[0]


@pytest.mark.usefixtures("kernel")
def test_human_in_the_loop_notebook(tmp_path: Path) -> None:
    nb = _execute("02_human_in_the_loop", tmp_path)
    assert (tmp_path / ".longtask" / "longtask.db").is_file()
    assert (tmp_path / "crashy.py").is_file() and (tmp_path / "crashed.marker").is_file()
    assert sorted((tmp_path / "runs.txt").read_text().split()) == [
        "download",
        "transform",
        "transform",
        "upload",
    ]
    tables = [html for html in _shown(nb, "text/html") if "<table" in html]
    assert [t for t in tables if "waiting_user" in t], "the paused status is not shown"
    assert [t for t in tables if "<b>running</b>" in t], "the crashed status is not shown"
    assert sum("<b>completed</b>" in t for t in tables) == 2


@pytest.mark.usefixtures("kernel")
def test_time_travel_notebook(tmp_path: Path) -> None:
    nb = _execute("03_time_travel", tmp_path)
    assert (tmp_path / ".longtask" / "longtask.db").is_file()
    html = _shown(nb, "text/html")
    assert len(html) == 3  # the history table and two checkpoint states
    assert "<table" in html[0] and "receipt" in html[0]
    assert "next: pay" in html[1] and ">20</td>" in html[1]  # price, before the fork
    assert "next: pay" in html[2] and ">35</td>" in html[2]  # price, on the fork


@pytest.mark.parametrize("name", NAMES)
def test_notebooks_are_saved_without_outputs(name: str) -> None:
    """Outputs stay out of the repository: CI makes them, the diff stays small."""
    for cell in _code_cells(name):
        assert cell.outputs == [] and cell.execution_count is None, cell.source[:80]
