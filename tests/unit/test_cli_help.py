"""The CLI's help and usage errors need no database and must not import LangGraph."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "longtask", *args], capture_output=True, text=True, timeout=60
    )


def test_help_lists_commands_without_importing_langgraph() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.argv=['longtask','--help']\n"
            "from longtask.cli import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\n"
            "    assert 'langgraph' not in sys.modules, 'langgraph imported by --help'\n"
            "    assert 'psycopg' not in sys.modules\n"
            "    print('OK')",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("OK")
    for command in ("run", "resume", "status", "ls", "history", "events", "db"):
        assert f"  {command} " in proc.stdout


def test_usage_errors_exit_2() -> None:
    assert _run("no-such-command").returncode == 2
    proc = _run("run")
    assert proc.returncode == 2
    assert "Missing argument" in proc.stderr


def test_bad_db_url_is_one_line_error_without_password() -> None:
    proc = _run("ls", "--db", "mysql://me:hunter2@localhost/x")
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: unsupported database URL")
    assert "hunter2" not in proc.stderr and "Traceback" not in proc.stderr


def test_usage_lines_and_options_name_values_not_python_types() -> None:
    """Every command's --help writes THREAD and [STEP] as a shell user pastes them, and
    names each option's value (--db URL, --by NAME), never ``{THREAD}`` or ``<str>``
    (issue 29, item 9)."""
    import re

    import typer.main

    from longtask.cli import app

    group: Any = typer.main.get_command(app)  # Typer's own click, not the click package
    seen = 0

    def walk(cmd: Any, path: list[str]) -> None:
        nonlocal seen
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
            return
        with cmd.context_class(cmd, info_name=" ".join(path)) as ctx:
            text = cmd.get_help(ctx)
        seen += 1
        assert not re.search(r"<[a-z][a-z\[\]|]*>", text), (path, text)
        assert not re.search(r"\{[A-Za-z_]+\}", text), (path, text)
        if any(p.name == "db" for p in cmd.params):
            assert "--db URL" in text, (path, text)

    walk(group, ["longtask"])
    assert seen > 30
    retry = group.commands["retry"]
    with retry.context_class(retry, info_name="longtask retry") as ctx:
        usage = retry.get_usage(ctx)
    assert usage.strip() == "Usage: longtask retry [OPTIONS] THREAD [STEP]", usage


def test_counts_are_pluralised() -> None:
    from longtask.cli._output import plural

    assert plural(1, "retry") == "1 retry" and plural(2, "retry") == "2 retries"
    assert plural(1, "step") == "1 step" and plural(0, "fix round") == "0 fix rounds"


def test_docs_approve_only_steps_an_example_has() -> None:
    """A pasted `longtask approve T STEP` from the README or docs/ names an approval some
    example defines (issue 29, item 9: the export example approved a ``ship_ok`` none has);
    the tutorial's own task is an example too."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    pages = [root / "README.md", *(root / "docs").rglob("*.md")]
    # the commands of their code blocks, the ones a reader pastes
    readme = "".join(
        block
        for page in pages
        for block in re.findall(r"```(?:bash|console)\n(.*?)```", page.read_text(), re.S)
    )
    examples = " ".join(p.read_text() for p in (root / "examples").rglob("*.py"))
    examples += (root / "docs" / "tutorial.md").read_text()
    steps = set(re.findall(r"longtask approve \S+ ([a-z_][a-z0-9_]*) --by", readme))
    assert steps
    for step in steps:
        assert re.search(rf"approval\(\s*[\"']{step}[\"']", examples), step


def test_each_command_is_found_in_the_module_that_registers_it() -> None:
    """A run of one command imports only its module (``cli._commands.load``): the map from
    command to module must name every command, and the module that really registers it."""
    import typer.main

    from longtask.cli import _commands, app

    found: dict[str, str] = {}
    for c in app.registered_commands:
        assert c.callback is not None
        name = c.name or typer.main.get_command_name(c.callback.__name__)
        found[name] = c.callback.__module__.rsplit(".", 1)[1]
    for g in app.registered_groups:
        assert g.name is not None and g.typer_instance is not None
        callbacks = [c.callback for c in g.typer_instance.registered_commands if c.callback]
        found[g.name] = callbacks[0].__module__.rsplit(".", 1)[1]
    expected = {name: _commands.MODULES.get(name, "_app") for name in found}
    assert found == expected
    assert set(_commands.MODULES) | _commands.OWN == set(found)
    assert {m for m in found.values() if m != "_app"} == set(_commands.ORDER)


def test_a_command_alone_imports_only_its_module() -> None:
    probe = (
        "import sys\nfrom longtask.cli import main\n"
        "try:\n    main(['pending', '--help'])\nexcept SystemExit:\n    pass\n"
        "import json\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('longtask.cli.'))))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "longtask.cli._pauses" in loaded
    assert not {"longtask.cli._travel", "longtask.cli._demo", "longtask.cli._workers"} & set(
        loaded
    ), loaded
    version = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom longtask.cli import main\n"
            "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'rich')))",
        ],
        capture_output=True,
        text=True,
    )
    assert version.stdout.startswith("longtask "), version.stderr
    assert version.stdout.strip().endswith("[]"), version.stdout


def test_the_outline_lists_what_the_full_app_lists() -> None:
    """`longtask --help` is built from an outline of the app (commands without their
    parameters, which the list does not show): its text is the full app's."""
    import typer.main

    from longtask.cli import app
    from longtask.cli._app import _outline

    def top_help(typer_app: Any) -> str:
        group: Any = typer.main.get_command(typer_app)
        with group.context_class(group, info_name="longtask") as ctx:
            return str(group.get_help(ctx))

    full = top_help(app)
    assert "  schedule " in full and "  migrate " in full
    assert top_help(_outline(app)) == full
