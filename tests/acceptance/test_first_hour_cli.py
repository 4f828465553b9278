"""What a new user meets in the CLI's first hour (issue 17), each in a new process at 80
columns: results and where to find them, JSON instead of Python's repr, tables that fit,
plans with text blocks, printed commands that work when pasted (``--db`` kept), the JSON
each pause expects, read commands that create nothing, and clear errors for a task
reference with too many colons and for unknown input keys."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import uuid
from pathlib import Path

import pytest
from conftest import _admin, _pg_url, run_cli

HERE = Path(__file__).resolve().parent
TASK = f"{HERE / 'first_hour_task.py'}:task"
QUICKSTART = f"{HERE.parent.parent / 'examples' / 'quickstart.py'}:task"
COLUMNS = {"COLUMNS": "80"}


def cli(
    *args: str, env_db: str = "", cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``longtask ARGS`` at 80 columns, with ``$LONGTASK_DB`` = ``env_db`` (empty: unset)."""
    return run_cli(*args, db=env_db, cwd=cwd, env={**COLUMNS, **(env or {})})


def paste(
    line: str, env: dict[str, str] | None = None, **fill: str
) -> subprocess.CompletedProcess[str]:
    """Run a command line exactly as printed (after ``fill`` replaces placeholders such as
    JSON), without $LONGTASK_DB: it must carry its own --db."""
    words = shlex.split(line)
    assert words[0] == "longtask", line
    words = [fill.get(w, w) for w in words]
    return cli(*words[1:], env=env)


def printed(stdout: str, prefix: str) -> str:
    """The one printed command line that starts with ``prefix``."""
    found = [ln.strip() for ln in stdout.splitlines() if ln.strip().startswith(prefix)]
    assert len(found) == 1, (prefix, stdout)
    return found[0]


def example(stdout: str, option: str) -> str:
    """The JSON the output says ``option`` looks like (``--payload looks like '{...}'``)."""
    line = printed(stdout, f"{option} looks like ")
    return shlex.split(line[len(f"{option} looks like ") :])[0]


def fits(stdout: str) -> None:
    too_long = [ln for ln in stdout.splitlines() if len(ln) > 80]
    assert not too_long, too_long


def test_every_printed_command_works_when_pasted_with_db(tmp_path: Path) -> None:
    """run -> wait (payload schema and example) -> approval (pending shows the plan's diff
    stat as a text block) -> an effect cut off mid-call (its name, arguments and result
    shape) -> completed (`longtask result`): each next command is the printed one, pasted
    as is, with no $LONGTASK_DB; it works because it keeps --db."""
    url = f"sqlite:///{tmp_path / 'fh.db'}"
    crash = {"LT_FH_CRASH_MARKER": str(tmp_path / "crashed")}
    run = cli("run", TASK, "--thread", "fh", "--input", '{"topic": "x"}', "--db", url)
    assert run.returncode == 3, run.stdout + run.stderr
    signal = printed(run.stdout, "longtask signal")
    assert signal == f"longtask signal fh ci --db {url} --payload JSON"
    assert "--payload JSON schema: " in run.stdout and '"enum": ["passed", "failed"]' in run.stdout
    payload = example(run.stdout, "--payload")
    assert json.loads(payload) == {"status": "passed", "url": None}

    signalled = paste(signal, JSON=payload)
    assert signalled.returncode == 3, signalled.stdout + signalled.stderr
    approve = printed(signalled.stdout, "longtask approve")
    assert approve == f"longtask approve fh release --db {url} --by alice"

    pending = paste(f"longtask pending fh --db {url}")
    assert pending.returncode == 0, pending.stderr
    fits("\n".join(ln for ln in pending.stdout.splitlines() if "longtask " not in ln))
    # the diff stat is a text block under its key, not one escaped "...\n..." line
    assert "\\n" not in pending.stdout
    assert '    "diff_stat": |\n       src/auth.py | 40 +++++-----\n' in pending.stdout
    assert '  plan: {\n    "summary": "release x",\n' in pending.stdout
    assert printed(pending.stdout, "approve: ") == f"approve: {approve}"

    died = paste(approve, env=crash)  # the charge kills the process inside the effect
    assert died.returncode == 1 and (tmp_path / "crashed").exists(), died.stdout + died.stderr
    resumed = paste(f"longtask resume fh --db {url}", env=crash)
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr
    resolve = printed(resumed.stdout, "longtask effects resolve")
    assert re.fullmatch(
        rf"longtask effects resolve fh eff-\w+ --db {re.escape(url)} --succeeded --result JSON"
        r"  \(or --failed, or --retry\)",
        resolve,
    ), resolve
    assert 'effect charge called with [5, {"note": "x"}]' in resumed.stdout
    receipt = example(resumed.stdout, "--result")
    assert json.loads(receipt) == {"charged": 0, "reference": "..."}
    shown = paste(f"longtask pending fh --db {url}")
    assert "  effect: charge (key eff-" in shown.stdout
    assert '  arguments: [5, {"note": "x"}]' in shown.stdout
    assert '  result looks like: {"charged": 0, "reference": "..."}' in shown.stdout

    done = paste(resolve.split("  (or")[0], JSON=receipt)
    assert done.returncode == 0, done.stdout + done.stderr
    results = printed(done.stdout, "results: ")
    assert results == f"results: longtask result fh --db {url}"
    final = paste(results[len("results: ") :])
    assert final.returncode == 0, final.stderr
    assert final.stdout == "report: |\n  # Release x\n\n  paid 0 (...)\n"


def test_hints_leave_out_db_that_came_from_the_environment(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    run = cli("run", TASK, "--thread", "e", "--input", '{"topic": "y"}', env_db=url)
    assert run.returncode == 3, run.stdout + run.stderr
    assert printed(run.stdout, "longtask signal") == "longtask signal e ci --payload JSON"
    status = cli("status", "e", env_db=url)
    assert "  longtask signal e ci --payload JSON" in status.stdout


def test_status_and_rejection_hints_keep_db(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rej.db'}"
    assert (
        cli("run", TASK, "--thread", "r", "--input", '{"topic": "z"}', "--db", url).returncode == 3
    )
    status = cli("status", "r", "--db", url)
    assert f"  longtask signal r ci --db {url} --payload JSON" in status.stdout
    cli("signal", "r", "ci", "--payload", '{"status": "passed"}', "--db", url)
    rejected = cli("reject", "r", "--by", "alice", "--db", url)
    assert rejected.returncode == 1
    assert rejected.stderr.startswith("error: approval 'release' was rejected by alice; ")
    assert len(rejected.stderr.splitlines()) == 1, rejected.stderr
    assert "PauseOutcome" not in rejected.stderr
    assert f"`longtask retry r release --db {url}`" in rejected.stderr
    status = cli("status", "r", "--db", url)
    assert f"ask again with: longtask retry r release --db {url}" in status.stdout


def test_unknown_thread_names_the_database_without_password(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'known.db'}"
    assert cli("db", "upgrade", "--db", url).returncode == 0
    missing = cli("status", "nope", "--db", url)
    assert missing.returncode == 1
    assert missing.stderr == (
        f"error: no thread 'nope' in {url}; list threads with `longtask ls --db {url}`\n"
    )
    secret = cli("status", "nope", "--db", "postgresql://root:hunter2@127.0.0.1:1/none")
    assert "hunter2" not in secret.stderr


def test_result_prints_final_results_as_json_with_text_blocks(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    run = cli("run", QUICKSTART, "--thread", "q", "--input", '{"topic": "x"}', env_db=url)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "results: longtask result q"
    final = cli("result", "q", env_db=url)
    assert final.stdout.startswith("write: |\n  # Notes on x\n  ## x: part 1 (9 chars)\n")
    one = cli("result", "q", "write", env_db=url)  # one string: its plain text
    assert one.stdout.startswith("# Notes on x\n## x: part 1")
    outline = cli("result", "q", "outline", "--json", env_db=url)
    assert json.loads(outline.stdout)["title"] == "Notes on x"  # a pydantic model, as JSON
    every = cli("result", "q", "--all", "--json", env_db=url)
    assert set(json.loads(every.stdout)) == {"outline", "research", "examples", "write"}
    text = cli("result", "q", "--all", env_db=url)
    assert '  "title": "Notes on x",' in text.stdout and "title='" not in text.stdout
    fits(text.stdout)


def test_show_prints_results_as_json_not_repr(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert cli("run", QUICKSTART, "--thread", "s", env_db=url).returncode == 0
    [latest, *_] = json.loads(cli("history", "s", "--json", env_db=url).stdout)
    shown = cli("show", "s", latest["checkpoint_id"], env_db=url)
    assert "title='" not in shown.stdout
    assert '  outline: {\n    "title": "Notes on durable execution",' in shown.stdout
    assert "  write: |\n    # Notes on durable execution\n" in shown.stdout


def test_history_fits_80_columns_with_whole_headers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert cli("run", QUICKSTART, "--thread", "h", env_db=url).returncode == 0
    table = cli("history", "h", env_db=url)
    assert table.returncode == 0, table.stderr
    fits(table.stdout)
    assert table.stdout.split()[:4] == ["checkpoint", "time", "completed", "done"]
    assert "…" not in table.stdout
    [latest, *_] = json.loads(cli("history", "h", "--json", env_db=url).stdout)
    assert latest["checkpoint_id"] in table.stdout  # whole: `show` and `fork` need it


def test_read_commands_create_no_database(tmp_path: Path) -> None:
    for args in (["ls"], ["status", "t"], ["events", "t"], ["result", "t"], ["history", "t"]):
        done = cli(*args, cwd=tmp_path)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert done.stderr.startswith(
            f"error: there is no longtask database at {tmp_path / '.longtask' / 'longtask.db'}; "
        ), done.stderr
        assert "`longtask db upgrade`" in done.stderr
        assert list(tmp_path.iterdir()) == [], args
    other = cli("ls", "--db", "sqlite:///elsewhere/x.db", cwd=tmp_path)
    assert "`longtask db upgrade --db sqlite:///elsewhere/x.db`" in other.stderr
    assert list(tmp_path.iterdir()) == []


def test_db_upgrade_reports_what_it_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    first = cli("db", "upgrade", "--db", url)
    assert first.stdout == (
        f"{url}: longtask tables created (schema version {_schema_version()})\n"
    )
    assert cli("db", "upgrade", "--db", url).stdout == f"{url}: already up to date\n"


def test_db_upgrade_reports_what_it_created_on_postgres(pg_template: str) -> None:
    name = f"lt_empty_{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE DATABASE "{name}"')
    try:
        url = _pg_url(name)
        first = cli("db", "upgrade", "--db", url)
        assert first.stdout.startswith(f"{url}: longtask tables created (schema version "), first
        assert "up to date" not in first.stdout
        assert cli("db", "upgrade", "--db", url).stdout == f"{url}: already up to date\n"
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _schema_version() -> int:
    from longtask.store._schema import SCHEMA_VERSION

    return SCHEMA_VERSION


def test_version_and_help_summaries_fit() -> None:
    import longtask

    version = cli("--version")
    assert version.returncode == 0
    assert version.stdout.startswith(f"longtask {longtask.__version__} (langgraph ")
    top = cli("--help")
    fits(top.stdout)
    commands = top.stdout.split("Commands:\n", 1)[1]
    assert "..." not in commands, commands
    assert "  result " in commands
    db = cli("db", "--help")
    assert "..." not in db.stdout.split("Commands:\n", 1)[1]


def test_task_reference_with_too_many_colons(tmp_path: Path) -> None:
    done = cli("run", f"{QUICKSTART}:extra", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: task reference '{QUICKSTART}:extra' has too many colons")
    assert "does not exist" not in done.stderr


@pytest.mark.parametrize("task", ["quickstart", "extras"])
def test_unknown_input_keys_are_refused_unless_the_model_allows_them(
    tmp_path: Path, task: str
) -> None:
    url = f"sqlite:///{tmp_path / 'i.db'}"
    if task == "quickstart":
        done = cli("run", QUICKSTART, "--input", '{"topic": "x", "extra": 1}', env_db=url)
        assert done.returncode == 1
        assert done.stderr == (
            "error: inputs for task 'quickstart' have unknown key 'extra'; Inputs takes "
            "topic, words\n"
        )
        assert json.loads(cli("ls", "--json", env_db=url).stdout) == []  # nothing stored
        return
    (tmp_path / "extras.py").write_text(
        "from pydantic import BaseModel, ConfigDict\n"
        "from longtask import LongTask, Stage, function_step\n"
        "class Inputs(BaseModel):\n"
        "    model_config = ConfigDict(extra='allow')\n"
        "    topic: str\n"
        "@function_step\n"
        "def echo(ctx):\n"
        "    return ctx.inputs.model_dump()\n"
        "task = LongTask(name='extras', version='1', inputs=Inputs, stages=[Stage('s', [echo])])\n"
    )
    done = cli(
        "run",
        f"{tmp_path / 'extras.py'}:task",
        "--thread",
        "x",
        "--input",
        '{"topic": "x", "extra": 1}',
        env_db=url,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(cli("result", "x", "echo", "--json", env_db=url).stdout) == {
        "topic": "x",
        "extra": 1,
    }


def test_cli_reference_is_generated_and_the_tests_section_says_what_ci_needs(
    tmp_path: Path,
) -> None:
    """The docs' command reference is made from the typer app at build time (no table to
    fall behind the CLI), `events` says it prints a table, and the README's Tests section
    names what the browser test needs and how to install it."""
    root = HERE.parent.parent
    assert "<!-- generated: cli -->" in (root / "docs" / "reference" / "cli.md").read_text()
    # `events` prints a table unless --json: its help must say so
    assert "A table, one event a line; --json prints JSON Lines." in cli("events", "--help").stdout
    url = f"sqlite:///{tmp_path / 'ev.db'}"
    assert cli("run", QUICKSTART, "--thread", "ev", env_db=url).returncode == 0
    first = cli("events", "ev", env_db=url).stdout.splitlines()[0]
    assert not first.startswith("{") and "longtask.started" in first
    readme = (root / "README.md").read_text()
    assert "being built next" not in readme
    # the Tests section names what the browser test needs and how to install it
    tests = readme.split("## Tests", 1)[1].split("\n## ", 1)[0]
    assert "test_browser.py" in tests and "apt-get install chromium" in tests
    assert "apt-get install chromium" in (HERE / "test_browser.py").read_text()


def test_ls_never_cuts_a_thread_id_and_filters_by_task_and_status(db_url: str) -> None:
    """Issue 29, point 5: the id is what a user copies, whole, at 80 columns as wider."""
    long_id = "lt-74420f6e8a1b-" + "x" * 50
    assert cli("run", QUICKSTART, "--thread", long_id, env_db=db_url).returncode == 0
    assert cli("run", QUICKSTART, "--thread", "short", env_db=db_url).returncode == 0
    paused = cli("run", TASK, "--thread", "fh", "--input", '{"topic": "x"}', env_db=db_url)
    assert paused.returncode == 3
    for columns in ("60", "80", "200"):
        for wide in ([], ["--wide"]):
            shown = run_cli("ls", *wide, db=db_url, env={"COLUMNS": columns})
            assert shown.returncode == 0, shown.stderr
            assert long_id in shown.stdout.split(), (columns, shown.stdout)
            assert ("updated" in shown.stdout) == bool(wide)
    only = cli("ls", "--task", "quickstart", env_db=db_url)
    assert long_id in only.stdout and "short" in only.stdout and "fh" not in only.stdout.split()
    waiting = cli("ls", "--status", "waiting_external", "--json", env_db=db_url)
    assert [t["thread_id"] for t in json.loads(waiting.stdout)] == ["fh"]
    both = cli("ls", "--task", "quickstart", "--status", "waiting_external", env_db=db_url)
    assert both.returncode == 0 and both.stdout.strip() == "no threads"
