"""A full disk under the SQLite default (issue 28, item 12): `longtask run` ends with one
line that says the disk is full and what to do — not an internal error, a warning and a
traceback hint — and the command it prints works once there is space.

The disk is a real one of a few hundred KiB: a tmpfs the test mounts (root only; the test
says so and is skipped elsewhere), filled up with a file to leave a chosen room free.
"""

from __future__ import annotations

import errno
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_cli

QUICKSTART = Path(__file__).parents[2] / "examples" / "quickstart.py"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("needs root, to mount a small tmpfs as a disk to fill")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` with one file until no byte is left, then give back ``leave`` bytes."""
    filler = disk / "filler"
    chunk = b"\0" * 4096
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, chunk) == len(chunk):
            pass
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - leave))
    return filler


@pytest.mark.parametrize("leave", [0, 8 * 1024, 32 * 1024, 96 * 1024])
def test_a_full_disk_is_one_line_and_the_printed_command_works(
    small_disk: Path, leave: int
) -> None:
    db = f"sqlite:///{small_disk}/lt.db"
    assert run_cli("db", "upgrade", db=db).returncode == 0
    filler = _fill(small_disk, leave)
    done = run_cli("run", f"{QUICKSTART}:task", "--input", '{"topic": "disk"}', db=db)
    if done.returncode == 0:  # room enough for the whole run
        assert "completed" in done.stdout
        return
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    # full before the database could even be opened (SQLite says "disk I/O error" for the
    # WAL index it cannot make), or full at a write of the run
    assert lines[0].startswith(
        ("error: the disk is full (no space left for the database ", "error: cannot open SQLite")
    ), done
    assert "the disk holding it is full" in lines[0] or lines[0].startswith("error: the disk")
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    filler.unlink()
    if "`longtask resume " in lines[0]:
        command = lines[0].split("`")[1]
        resumed = run_cli(*shlex.split(command)[1:], db=db)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "completed" in resumed.stdout
    else:
        assert lines[0].rstrip(".").endswith("free some space, then run the command again")
        again = run_cli("run", f"{QUICKSTART}:task", "--input", '{"topic": "disk"}', db=db)
        assert again.returncode == 0, again.stderr
