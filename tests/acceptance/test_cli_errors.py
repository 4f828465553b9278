"""Bad input on the command line gets one clear line, a usage exit code where it is a usage
error, and leaves the database as it was (issue 15: thread ids, --input, --by, --kind)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from conftest import run_cli

from longtask import InvalidInput, LongTask, Runner, Stage, function_step

TASK = """\
from longtask import LongTask, Stage, function_step


@function_step
def one(ctx):
    return {"n": 1}


task = LongTask("small", stages=[Stage("one", [one])])
"""


@pytest.fixture
def ref(tmp_path: Path) -> str:
    path = tmp_path / "small.py"
    path.write_text(TASK)
    return f"{path}:task"


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    errors = [line for line in lines if line.startswith(("error:", "Error:"))]
    assert len(errors) == 1, stderr
    return errors[0]


def _threads(db: str) -> list[str]:
    with Runner(db) as runner:
        return [t.thread_id for t in runner.threads()]


# -- thread ids -------------------------------------------------------------------------------


def test_a_thread_id_with_a_trailing_newline_is_refused(sqlite_url: str, ref: str) -> None:
    done = run_cli("run", ref, "--thread", "abc", db=sqlite_url)
    assert done.returncode == 0, done.stdout + done.stderr
    refused = run_cli("run", ref, "--thread", "abc\n", db=sqlite_url)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = _one_error_line(refused.stderr)
    assert "--thread" in line and "thread id 'abc\\n' is not allowed" in line
    assert _threads(sqlite_url) == ["abc"]


def test_an_empty_thread_id_is_refused(sqlite_url: str, ref: str) -> None:
    refused = run_cli("run", ref, "--thread", "", db=sqlite_url)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = _one_error_line(refused.stderr)
    assert "the thread id is empty" in line and "leave it out" in line
    assert _threads(sqlite_url) == []


def test_the_runner_refuses_the_same_thread_ids(sqlite_url: str) -> None:
    @function_step
    def one(ctx: object) -> int:
        return 1

    task = LongTask("small", stages=[Stage("one", [one])])
    with Runner(sqlite_url) as runner:
        for bad in ("", "abc\n", "\nabc", "a b"):
            with pytest.raises(InvalidInput):
                runner.start(task, thread_id=bad)
        assert runner.threads() == []
        assert runner.start(task).startswith("lt-")  # left out: a new random id


# -- JSON options, --by, --kind -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("1" * 5000, "has a number with more than 4300 digits; pass it as a JSON string"),
        ("[" * 100_000 + "]" * 100_000, "is nested too deeply"),
    ],
    ids=["long-integer", "deep-nesting"],
)
def test_unreadable_input_json_is_one_line(
    sqlite_url: str, ref: str, tmp_path: Path, value: str, says: str
) -> None:
    # from a file: 200,000 characters are more than one command-line argument may hold
    (tmp_path / "input.json").write_text(value)
    at = f"@{tmp_path / 'input.json'}"
    refused = run_cli("run", ref, "--thread", "t1", "--input", at, db=sqlite_url)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = _one_error_line(refused.stderr)
    assert "--input" in line and says in line, line
    assert _threads(sqlite_url) == []


def test_an_empty_approver_is_one_line(sqlite_url: str, tmp_path: Path) -> None:
    path = tmp_path / "gate.py"
    path.write_text(
        "from longtask import LongTask, Stage, approval\n"
        "gate = approval('gate', plan=lambda ctx: {'go': True})\n"
        "task = LongTask('gated', stages=[Stage('one', [gate])])\n"
    )
    paused = run_cli("run", f"{path}:task", "--thread", "g1", db=sqlite_url)
    assert paused.returncode == 3, paused.stdout + paused.stderr
    for by in ("", "  "):
        refused = run_cli("approve", "g1", "--by", by, db=sqlite_url)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        line = _one_error_line(refused.stderr)
        assert "--by" in line and "must be a name" in line, line
    # cancel --by and migrate --by took these as given (issue 39): one check for every --by
    for args in (["cancel", "g1"], ["migrate", "g1", "--task", f"{path}:task", "--to", "1"]):
        for by in ("ali\nce", "x\x01y", "z" * 2000):
            refused = run_cli(*args, "--by", by, db=sqlite_url)
            assert refused.returncode == 2, refused.stdout + refused.stderr
            line = _one_error_line(refused.stderr)
            assert "--by" in line and "who acts" in line, line
    with Runner(sqlite_url) as runner:
        assert runner.status("g1").status == "waiting_user"
        assert not [e for e in runner.events("g1") if e.kind == "approval.resolved"]
        assert not [e for e in runner.events("g1") if e.kind == "longtask.cancelled"]


def test_an_unknown_event_kind_is_refused(sqlite_url: str, ref: str) -> None:
    assert run_cli("run", ref, "--thread", "k1", db=sqlite_url).returncode == 0
    refused = run_cli("events", "k1", "--kind", "bogus.kind", db=sqlite_url)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = _one_error_line(refused.stderr)
    assert "unknown event kind 'bogus.kind'" in line
    assert "step.completed" in line and "longtask.completed" in line
    known = run_cli("events", "k1", "--kind", "step.completed", db=sqlite_url)
    assert known.returncode == 0, known.stderr
    assert "step.completed" in known.stdout and "step.started" not in known.stdout


# -- PostgreSQL ---------------------------------------------------------------------------------

CUT = """\
import os
from pathlib import Path

import psycopg
from longtask import LongTask, Stage, function_step


@function_step
def first(ctx):
    return 1


@function_step
def cut(ctx):
    # Once: end every connection of the runner to this database; with LT_FOR_GOOD, also
    # refuse new ones (the server went away) until the test lets them in again.
    marker = Path(os.environ["LT_CUT_MARKER"])
    if not marker.exists():
        marker.write_text("cut")
        name = os.environ["LT_PG_URL"].rsplit("/", 1)[1]
        with psycopg.connect(os.environ["LT_ADMIN_URL"], autocommit=True) as conn:
            if os.environ.get("LT_FOR_GOOD"):
                conn.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
    return 2


@function_step
def last(ctx):
    return 3


task = LongTask("cut", stages=[Stage("a", [first]), Stage("b", [cut]), Stage("c", [last])])
"""


def _cut_env(pg_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    from conftest import PG_ADMIN_URL

    (tmp_path / "cut.py").write_text(CUT)
    return {
        "LT_PG_URL": pg_url,
        "LT_ADMIN_URL": PG_ADMIN_URL,
        "LT_CUT_MARKER": str(tmp_path / "cut"),
        **extra,
    }


def test_a_connection_cut_mid_run_is_survived(pg_url: str, tmp_path: Path) -> None:
    """The server ends the runner's connections once (a restart of a pooler, an idle
    timeout): the saver's next write reconnects, and the run goes on to the end."""
    env = _cut_env(pg_url, tmp_path)
    done = run_cli("run", f"{tmp_path / 'cut.py'}:task", "--thread", "c0", db=pg_url, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "cut").exists()
    with Runner(pg_url) as runner:
        assert runner.status("c0").status == "completed"
        assert runner.result("c0", "last") == 3
        assert len(runner.branches("c0")) == 1


def test_a_connection_lost_mid_run_says_so_and_how_to_resume(pg_url: str, tmp_path: Path) -> None:
    from conftest import _admin

    env = _cut_env(pg_url, tmp_path, LT_FOR_GOOD="1", LONGTASK_DB_TIMEOUT="2")
    path = tmp_path / "cut.py"
    # a password the server ignores (trust auth) but the message must not show
    base, _, rest = pg_url.partition("://")
    url = f"{base}://{rest.replace('@', ':s3cret@', 1)}"
    try:
        lost = run_cli("run", f"{path}:task", "--thread", "c1", "--db", url, db=url, env=env)
    finally:
        _admin(f'ALTER DATABASE "{pg_url.rsplit("/", 1)[1]}" WITH ALLOW_CONNECTIONS true')
    assert lost.returncode == 1, lost.stdout + lost.stderr
    assert (tmp_path / "cut").exists()
    assert "s3cret" not in lost.stderr + lost.stdout
    line = _one_error_line(lost.stderr)
    assert "internal error" not in lost.stderr and "AdminShutdown" not in line, line
    redacted = url.replace("s3cret", "***")
    assert line.startswith(f"error: lost the connection to the database {redacted} ("), line
    command = f"longtask resume c1 --db '{redacted}'"
    assert f"continue with `{command}` (with the password in place of ***)" in line, line
    assert lost.stderr.count("Traceback") == 0

    # the printed command (password put back) continues the thread to the end
    args = shlex.split(command.replace("***", "s3cret"))[1:]
    resumed = run_cli(*args, db=url, env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    with Runner(pg_url) as runner:
        assert runner.status("c1").status == "completed"
        assert runner.result("c1", "last") == 3


def test_a_refused_connection_reads_as_sentences(sqlite_url: str) -> None:
    refused = run_cli("ls", db="postgresql://root:s3cret@127.0.0.1:9/nowhere")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    line = _one_error_line(refused.stderr)
    assert "s3cret" not in refused.stderr
    assert "?." not in line and ".." not in line, line
    assert line.startswith("error: cannot connect to PostgreSQL at postgresql://root:***@"), line
    assert line.endswith(
        "? Check that the server is running and the URL (--db / $LONGTASK_DB) is right."
    ), line


def test_the_runner_refuses_an_empty_approver_in_one_line(sqlite_url: str) -> None:
    from longtask import approval

    task = LongTask("gated", stages=[Stage("one", [approval("gate", plan=lambda ctx: {})])])
    with Runner(sqlite_url) as runner:
        runner.start(task, thread_id="g2")
        with pytest.raises(InvalidInput) as info:
            runner.approve("g2", by="", task=task)
        assert str(info.value) == (
            "who acts (--by, by=) must be a name, not '': it is recorded in the event (and "
            "checked against an approval's approvers)"
        )
        assert runner.status("g2").status == "waiting_user"


# -- issue 28, item 12: inputs that were internal errors ----------------------------------

HUGE = str(10**30)


@pytest.mark.parametrize(
    "args",
    [
        ["ls", "--limit", HUGE],
        ["events", "t1", "--since", HUGE],
        ["history", "t1", "--limit", HUGE],
        ["prune", "--completed-before", "1d", "--batch", HUGE],
        ["prune", "--completed-before", HUGE + "d"],
    ],
    ids=["ls-limit", "events-since", "history-limit", "prune-batch", "prune-age"],
)
def test_a_huge_number_in_an_option_is_a_usage_error(
    db_url: str, ref: str, args: list[str]
) -> None:
    started = run_cli("run", ref, "--thread", "t1", db=db_url)
    assert started.returncode == 0, started.stdout + started.stderr
    refused = run_cli(*args, db=db_url)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = _one_error_line(refused.stderr)
    assert f"--{args[-2].lstrip('-')}" in line, line
    assert _threads(db_url) == ["t1"]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b'{"x": "\xff\xfe"}', "is not UTF-8 text (byte 7: 0xff)"),
        (b"\x7fELF\x02\x01\x01\x00\xd0\xff", "is not UTF-8 text"),
        (b'{"x": "\\ud800"}', "the value['x'] (character 0: '\\ud800') is not valid Unicode"),
    ],
    ids=["bad-byte", "binary", "lone-surrogate"],
)
def test_input_that_is_not_text_is_one_line(
    sqlite_url: str, ref: str, tmp_path: Path, content: bytes, says: str
) -> None:
    (tmp_path / "input.json").write_bytes(content)
    refused = run_cli(
        "run", ref, "--thread", "t1", "--input", f"@{tmp_path / 'input.json'}", db=sqlite_url
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = _one_error_line(refused.stderr)
    assert "--input" in line and says in line, line
    assert _threads(sqlite_url) == []


def test_an_invalid_byte_in_an_input_argument_is_one_line(sqlite_url: str, ref: str) -> None:
    # Python decodes the byte 0xff of an argument to the lone surrogate \udcff.
    refused = run_cli("run", ref, "--thread", "t1", "--input", '{"x": "\udcff"}', db=sqlite_url)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = _one_error_line(refused.stderr)
    assert "--input" in line and "is not valid Unicode text" in line, line
    assert _threads(sqlite_url) == []


@pytest.mark.parametrize(
    ("source", "name", "says"),
    [
        ("def f(x):\n    return x\n", "f", "is a function that takes arguments, not a LongTask"),
        ("def f():\n    raise ValueError('boom')\n", "f", "calling it to make one failed"),
        ("import sys\nsys.exit(3)\n", "task", "called sys.exit(3)"),
    ],
    ids=["needs-arguments", "factory-fails", "exits-at-import"],
)
def test_a_task_reference_to_no_task_is_one_line(
    sqlite_url: str, tmp_path: Path, source: str, name: str, says: str
) -> None:
    (tmp_path / "notask.py").write_text(source)
    refused = run_cli("run", f"{tmp_path / 'notask.py'}:{name}", "--thread", "t1", db=sqlite_url)
    assert refused.returncode == 1, refused.stdout + refused.stderr  # not 3 ("paused")
    line = _one_error_line(refused.stderr)
    assert says in line, line


# -- workers on SQLite (issue 29, item 12) -------------------------------------------------------


@pytest.mark.parametrize("how", ["option", "env", "default"])
@pytest.mark.parametrize("command", ["submit", "worker"])
def test_workers_refuse_sqlite_before_creating_a_database(
    tmp_path: Path, ref: str, command: str, how: str
) -> None:
    db = tmp_path / "new" / "queue.db"
    args = ["submit", ref, "--thread", "t1"] if command == "submit" else ["worker"]
    env_db = f"sqlite:///{db}"
    if how == "option":
        args += ["--db", f"sqlite:///{db}"]
        env_db = "sqlite:///elsewhere.db"
    elif how == "default":
        env_db = ""
    proc = run_cli(*args, db=env_db, cwd=tmp_path)
    assert proc.returncode != 0
    line = _one_error_line(proc.stderr)
    assert "workers share threads through PostgreSQL" in line, line
    assert "--db postgresql://" in line, line
    # Nothing was created: not the file, not its directory, not the default one.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.py"], list(tmp_path.iterdir())


def test_run_on_a_completed_thread_points_at_its_results(tmp_path: Path, ref: str) -> None:
    """Not at `resume`, which would only say there is nothing to resume (issue 29, item 9);
    one step is "1 step"."""
    url = f"sqlite:///{tmp_path / 'lt.db'}"
    first = run_cli("run", ref, "--thread", "t1", "--db", url, db="sqlite:///elsewhere.db")
    assert first.returncode == 0, first.stderr
    assert "thread t1 completed (1 step)" in first.stdout, first.stdout
    again = run_cli("run", ref, "--thread", "t1", "--db", url, db="sqlite:///elsewhere.db")
    assert again.returncode != 0
    line = _one_error_line(again.stderr)
    assert "already exists and is completed" in line and "resume" not in line, line
    printed = line.split("`")[1]
    assert printed == f"longtask result t1 --db {url}", line
    pasted = run_cli(*shlex.split(printed)[1:], db="sqlite:///elsewhere.db")
    assert pasted.returncode == 0, pasted.stderr
    assert '"n": 1' in pasted.stdout, pasted.stdout


def test_watch_prints_the_whole_schema_and_commands_however_narrow(tmp_path: Path) -> None:
    """A terminal narrower than the schema: what the paused thread waits for is printed
    after the live view whole (it was cut mid-JSON with no sign of it), and the command
    works pasted (issue 29, item 9)."""
    release = Path(__file__).resolve().parents[2] / "examples" / "release.py"
    url = f"sqlite:///{tmp_path / 'lt.db'}"
    inputs = '{"version": "1.4.0"}'
    run = run_cli("run", f"{release}:task", "--thread", "r", "--input", inputs, db=url)
    assert run.returncode == 3, run.stderr
    watch = run_cli("watch", "r", "--db", url, db="sqlite:///elsewhere.db", env={"COLUMNS": "60"})
    assert watch.returncode == 3, watch.stderr
    lines = watch.stdout.splitlines()
    assert lines.count("waiting for:") == 1, watch.stdout
    schema = next(line for line in lines if "JSON schema:" in line).split("schema: ", 1)[1]
    assert set(json.loads(schema)["properties"]) == {"status", "url"}, watch.stdout
    signal = next(line.strip() for line in lines if line.strip().startswith("longtask signal"))
    assert signal == f"longtask signal r ci --db {url} --payload JSON", watch.stdout
    payload = '{"status": "passed", "url": "https://ci/1"}'
    pasted = run_cli(*shlex.split(signal.replace("JSON", shlex.quote(payload)))[1:], db="x.db")
    assert pasted.returncode == 3, pasted.stderr  # on to the approval
