"""Cold-process time of the CLI's reads (issue 29, point 1): each command is a new
``longtask`` process, timed whole (start to exit) from outside.

    python bench/cli.py                  # SQLite, 5 runs per command
    python bench/cli.py --runs 9
    python bench/cli.py --backend postgres

A quickstart thread (4 steps, completed) and a release thread (paused for CI) are made
first with ``longtask run``; then every command runs once to warm the disk cache and
``--runs`` times more. The figures are the median, min and max of the wall time, and the
median CPU time (user + system) of the child process. Targets: ``--version``/``--help``
<= 150 ms, ``status``/``ls``/``events``/``pending``/``result`` <= 300 ms; printed as
``met``/``missed``, never asserted.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import DEFAULT_PG, machine_info, ms, table

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"--version": 0.150, "--help": 0.150}
READ_TARGET = 0.300
RELEASE_ARGS = ["--thread", "rel", "--input", '{"version": "1.4.0"}']
READS_WITH_TARGET = {"status", "ls", "events", "pending", "result"}


def _longtask() -> list[str]:
    found = shutil.which("longtask", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "longtask"]


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pg", default=DEFAULT_PG, help="PostgreSQL admin URL")
    parser.add_argument(
        "--command",
        default=None,
        help="how to run longtask, e.g. to time another checkout: "
        "'python /path/to/launcher.py' [default: this venv's longtask]",
    )
    args = parser.parse_args()
    print("command: python " + " ".join(sys.argv))
    for line in machine_info(args.pg, [args.backend]):
        print(line)
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    work = Path(tempfile.mkdtemp(prefix="longtask-bench-cli-"))
    dropped = None
    if args.backend == "sqlite":
        db = f"sqlite:///{work / 'bench.db'}"
    else:
        import psycopg

        name = f"lt_bench_cli_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.pg, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        db = args.pg.rsplit("/", 1)[0] + f"/{name}"
        dropped = name
        subprocess.run([*_longtask(), "db", "upgrade", "--db", db], check=True, capture_output=True)
    env = {**os.environ, "LONGTASK_DB": db}
    lt = shlex.split(args.command) if args.command else _longtask()
    print("timed: " + shlex.join(lt))
    try:
        subprocess.run(
            [*lt, "run", str(ROOT / "examples/quickstart.py:task"), "--thread", "qs"],
            env=env,
            cwd=work,
            check=True,
            capture_output=True,
        )
        made = subprocess.run(
            [*lt, "run", str(ROOT / "examples/release.py:task"), *RELEASE_ARGS],
            env=env,
            cwd=work,
            capture_output=True,
        )
        assert made.returncode == 3, made.stderr
        commands = [
            ["--version"],
            ["--help"],
            ["status", "qs"],
            ["ls"],
            ["events", "qs"],
            ["pending", "rel"],
            ["result", "qs"],
            ["effects", "qs"],
            ["history", "qs"],
        ]
        rows = []
        # the floor: the interpreter alone, started the way the commands are
        floor = [[sys.executable, "-c", "pass"], [sys.executable, "-c", "import typer, rich"]]
        for argv in floor:
            _timed(argv, env, work)
            runs = [_timed(argv, env, work) for _ in range(args.runs)]
            walls = [r[0] for r in runs]
            name = "python -c " + shlex.quote(argv[-1])
            spread = f"{ms(min(walls))}–{ms(max(walls))}"
            cpu = ms(statistics.median(r[1] for r in runs))
            rows.append([name, ms(statistics.median(walls)), spread, cpu, "", "", "0"])
        for command in commands:
            argv = [*lt, *command]
            _timed(argv, env, work)  # warm the disk cache
            runs = [_timed(argv, env, work) for _ in range(args.runs)]
            codes = {r[2] for r in runs}
            walls = [r[0] for r in runs]
            med = statistics.median(walls)
            target = TARGETS.get(
                command[0], READ_TARGET if command[0] in READS_WITH_TARGET else None
            )
            verdict = "" if target is None else ("met" if med <= target else "missed")
            rows.append(
                [
                    "longtask " + " ".join(command),
                    ms(med),
                    f"{ms(min(walls))}–{ms(max(walls))}",
                    ms(statistics.median(r[1] for r in runs)),
                    "" if target is None else f"<= {target * 1000:.0f}",
                    verdict,
                    ",".join(map(str, sorted(codes))),
                ]
            )
        print(f"\n## {args.backend}: cold process per command (median of {args.runs}; ms)\n")
        print(
            table(
                ["command", "wall", "range", "CPU", "target", "", "exit"],
                rows,
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if dropped:
            import psycopg

            with psycopg.connect(args.pg, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {dropped} WITH (FORCE)")
    print("load average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
