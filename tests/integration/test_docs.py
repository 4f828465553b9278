"""The documentation is tested: the site builds with ``mkdocs build --strict`` (offline), and
every Python and shell block of the README and of docs/ either runs here or says, in an
HTML comment right above it, why it cannot (``<!-- not-run: REASON -->``).

The pages in ``RUN_PAGES`` run top to bottom in an empty directory, as a reader would: a
``python title="F"`` block is written to the file F, another Python block is executed (the
blocks of a page share one namespace, like a notebook's cells), and each line of a shell
block is run with bash; a line ending in ``# exit N`` must exit N, any other must exit 0.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

#: the pages whose blocks this test runs (the others' blocks must each say why they cannot)
RUN_PAGES = (
    "README.md",
    "docs/tutorial.md",
    "docs/guide/defining-tasks.md",
    "docs/howto/testing.md",
    "docs/guide/subtasks.md",
)
#: languages of the blocks that must run or say why not
CODE_LANGUAGES = frozenset({"python", "py", "bash", "sh", "shell", "console"})

FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w-]*)(?P<attrs>.*)$")
NOT_RUN = re.compile(r"^\s*<!-- not-run: (?P<why>.+?) -->\s*$")
EXIT = re.compile(r"#\s*exit (\d+)\s*$")


@dataclass
class Block:
    page: str
    line: int
    lang: str
    attrs: str
    code: str
    not_run: str | None

    @property
    def title(self) -> str | None:
        found = re.search(r'title="([^"]+)"', self.attrs)
        return found.group(1) if found else None


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, with the not-run reason written before each."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent = fence["indent"]
        end = next(
            j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"
        )  # a fence closes at the next bare ```
        code = "\n".join(line.removeprefix(indent) for line in lines[i + 1 : end])
        # the not-run comment may stand among other comments right above the fence (the
        # README's <!-- test-command --> marker must be the line just before its block)
        before = None
        j = i - 1
        while j >= 0 and lines[j].strip().startswith("<!--") and before is None:
            before = NOT_RUN.match(lines[j])
            j -= 1
        found.append(
            Block(
                page=str(path.relative_to(ROOT)),
                line=i + 1,
                lang=fence["lang"],
                attrs=fence["attrs"],
                code=code + "\n",
                not_run=before["why"] if before else None,
            )
        )
        i = end + 1
    return found


def all_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_every_code_block_runs_or_says_why_not() -> None:
    unmarked = []
    for page in all_pages():
        name = str(page.relative_to(ROOT))
        for block in blocks(page):
            if block.lang not in CODE_LANGUAGES:
                continue
            if block.not_run is not None:
                assert len(block.not_run.split()) >= 2, f"{name}:{block.line}: say why"
            elif name not in RUN_PAGES:
                unmarked.append(f"{name}:{block.line}")
    assert not unmarked, (
        "these blocks neither run in tests/integration/test_docs.py nor say why they cannot "
        f"(add `<!-- not-run: REASON -->` on the line before the fence): {unmarked}"
    )


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LONGTASK_DB"}
    # the `longtask` command of the Python running the tests
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_page(page: str, where: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a page's blocks in ``where``; what its Python blocks printed."""
    monkeypatch.chdir(where)
    monkeypatch.syspath_prepend(str(where))  # the files a page wrote import as modules
    monkeypatch.delenv("LONGTASK_DB", raising=False)
    namespace: dict[str, object] = {"__name__": "docs_page"}
    printed = io.StringIO()
    for block in blocks(ROOT / page):
        if block.lang not in CODE_LANGUAGES or block.not_run is not None:
            continue
        at = f"{page}:{block.line}"
        if block.lang in ("python", "py") and block.title:
            (where / block.title).write_text(block.code)
        elif block.lang in ("python", "py"):
            with redirect_stdout(printed):
                exec(compile(block.code, at, "exec"), namespace)
        else:
            for line in block.code.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                expected = int(m.group(1)) if (m := EXIT.search(line)) else 0
                proc = subprocess.run(
                    ["bash", "-c", line],
                    cwd=where,
                    env=_env(),
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                assert proc.returncode == expected, (
                    f"{at}: `{line}` exited {proc.returncode}, expected {expected}\n"
                    f"{proc.stdout}\n{proc.stderr}"
                )
    return printed.getvalue()


def test_readme_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's minimal task runs as written, on the embedded SQLite default, in a
    namespace that is not an importable module (the inputs model need not be)."""
    out = run_page("README.md", tmp_path, monkeypatch)
    assert out.startswith("completed Notes on durable agents")
    assert (tmp_path / ".longtask" / "longtask.db").exists()


def test_tutorial_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = run_page("docs/tutorial.md", tmp_path, monkeypatch)
    assert "published: 3 words" in out
    assert (tmp_path / "tasks.py").exists()


def test_testing_guide_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_page("docs/howto/testing.md", tmp_path, monkeypatch)


def test_subtasks_guide_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_page("docs/guide/subtasks.md", tmp_path, monkeypatch)
    shown = subprocess.run(
        ["longtask", "result", "big-move", "each", "--json"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(shown.stdout) == ["billing migrated", "search migrated", "auth migrated"]


def test_readme_is_short_and_keeps_the_marked_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for marker in ("<!-- demo-command -->", "<!-- test-command -->"):
        # .ci/run (and whoever reads the demo command) takes the bash block right after it
        after = text.split(marker + "\n", 1)[1]
        assert after.startswith("```bash\n"), f"{marker} must be followed by a bash block"
    test_command = text.split("<!-- test-command -->", 1)[1].split("```bash\n", 1)[1]
    assert "pytest" in test_command.splitlines()[0]


def test_configuration_page_names_every_variable_the_code_reads() -> None:
    code = " ".join(p.read_text() for p in (ROOT / "longtask").rglob("*.py"))
    names = set(re.findall(r"\bLONGTASK_[A-Z_]+\b", code)) | {"OPENAI_API_KEY", "OPENAI_BASE_URL"}
    page = (DOCS / "reference" / "configuration.md").read_text()
    missing = sorted(n for n in names if f"`{n}`" not in page)
    assert not missing, f"docs/reference/configuration.md does not describe {missing}"


def test_site_builds_strict_and_offline(tmp_path: Path) -> None:
    """``mkdocs build --strict``: no broken link or anchor, no page left out of the nav, and
    the generated reference parts (docs/hooks.py) agree with the code. No network: the
    theme's web fonts are off, and mermaid diagrams are drawn in the reader's browser."""
    env = {**_env(), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    for command in ("longtask migrate", "longtask schedule add", "longtask db upgrade"):
        assert command in cli, f"the CLI reference lacks {command}"
    events = (tmp_path / "site" / "reference" / "events" / "index.html").read_text()
    assert "definition.migrated" in events and "manual.goto" in events
    api = (tmp_path / "site" / "reference" / "python" / "index.html").read_text()
    assert "Runner.approve" in api and "StepContext" in api


def test_defining_tasks_guide_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = run_page("docs/guide/defining-tasks.md", tmp_path, monkeypatch)
    assert out.startswith("completed Notes on durable agents")


#: a page's block that is part of a tested file: (page, the not-run reason's mark, file,
#: the line that opens the part, the line that closes it)
INCLUDED = (
    (
        "docs/howto/users.md",
        "tests/acceptance/lgdiff_auth.py's handler",
        "tests/acceptance/lgdiff_auth.py",
        "# -- the handler of docs/howto/users.md --",
        "# -- end of the handler of docs/howto/users.md --",
    ),
)


def included_part(path: Path, start: str, end: str) -> str:
    """The lines of ``path`` between the line ``start`` and the line ``end``, without the
    blank lines the formatter keeps before ``end``."""
    lines = path.read_text().splitlines()
    part = lines[lines.index(start) + 1 : lines.index(end)]
    while part and not part[-1].strip():
        part.pop()
    return "\n".join(part) + "\n"


@pytest.mark.parametrize(("page", "mark", "source", "start", "end"), INCLUDED)
def test_a_printed_block_is_its_tested_files_text(
    page: str, mark: str, source: str, start: str, end: str
) -> None:
    """The auth handler users copy from the docs is the one the differential test runs on
    LangGraph's server and on longtask's (test_lg_auth_differential.py), line for line."""
    marked = [b for b in blocks(ROOT / page) if b.not_run and mark in b.not_run]
    assert len(marked) == 1, f"{page}: no block (or several) whose not-run names {mark!r}"
    want = included_part(ROOT / source, start, end)
    assert marked[0].code == want, (
        f"{page}:{marked[0].line} differs from {source}: copy the lines between "
        f"{start!r} and {end!r} into the block"
    )
