"""How the CLI reports what stopped a command: Ctrl-C, a lost database connection, log
warnings. ``longtask.cli._app._dispatch`` is the one place that prints them."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from typer.core import TyperGroup

from longtask.errors import connection_error

#: what the running command works on, for the message if it is stopped mid-way
session: dict[str, str | None] = {"db": None, "thread": None}


class Interrupted(Exception):
    """Ctrl-C during a command, carried past Typer (which would exit 130 silently) to the
    one place that prints how to continue."""


#: seconds a command has, after Ctrl-C, to stop by itself before the process ends anyway
CTRL_C_GRACE = 1.5
#: set once the Ctrl-C message is printed (so it is printed once)
reported = threading.Event()
_wakeup: list[Any] = []


def stop_on_ctrl_c(hint: Callable[[], str]) -> None:
    """Make Ctrl-C end this process within about ``CTRL_C_GRACE`` seconds, exit 130.

    Ctrl-C raises KeyboardInterrupt in the main thread, which stops a run at once when
    the step runs there. But a step LangGraph runs on its executor's threads (steps side by
    side) holds the run until the step returns: the executor waits for its threads, a
    minute for a step of a minute. And a signal the kernel hands to another thread does not
    wake the main thread from a blocking call. So the signal is also written to a wakeup
    fd, read by a thread of our own: it wakes the main thread if the signal has not reached
    it, and ends the process if the run is still stopping after the grace. What is
    committed stays (every step's checkpoint is durable before the next starts): the thread
    is left as after a crash, running with no process advancing it, for ``longtask resume``.
    """
    import os
    import signal
    import socket
    import time

    if threading.current_thread() is not threading.main_thread():
        return
    main_id = threading.main_thread().ident
    assert main_id is not None
    handled = threading.Event()
    rsock, wsock = socket.socketpair()
    wsock.setblocking(False)
    # kept open for the life of the process: the wakeup fd is wsock's number, which a closed
    # socket would hand to the next file opened
    _wakeup.extend((rsock, wsock))

    def on_sigint(signum: int, frame: Any) -> None:
        handled.set()
        raise KeyboardInterrupt

    def watch() -> None:
        while signal.SIGINT not in rsock.recv(64):
            pass
        if not handled.wait(0.3):
            signal.pthread_kill(main_id, signal.SIGINT)
        time.sleep(CTRL_C_GRACE)
        if not reported.is_set():
            os.write(2, f"interrupted; {hint()}\n".encode())
        os._exit(130)

    signal.signal(signal.SIGINT, on_sigint)
    signal.set_wakeup_fd(wsock.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=watch, name="longtask-ctrl-c", daemon=True).start()


class Group(TyperGroup):
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise Interrupted() from exc


class OneLineWarning(logging.Handler):
    """Python's last-resort log handler, one line per record and no traceback (--debug
    keeps the tracebacks): what went wrong reaches the user as the command's own error.
    Used only while nothing configured logging (``longtask worker`` does).

    A warning that the database connection failed is held, not printed: when the command
    then ends because the database is lost, its one error line says so and names the
    command that continues (the held lines were its echoes: 2 to 6 lines for one fault);
    when it ends any other way, ``release_held`` prints them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.held: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not record.name.startswith("longtask") and record.levelno < logging.ERROR:
            return  # a driver's own notes (a pool discarding a closed connection)
        text = record.getMessage().strip().splitlines()[0] if record.getMessage() else ""
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and disk_full(exc) is not None:
            return  # the command ends with the one line that says so, and what to do

        if exc is not None and str(exc).strip():
            text += f": {str(exc).strip().splitlines()[0]}"
        line = f"warning: {scrub_env(text)}\n"
        if exc is not None and connection_error(exc) is not None:
            self.held.append(line)
            return
        try:
            sys.stderr.write(line)
        except Exception:
            self.handleError(record)


def one_line_warnings() -> None:
    # lastResort only handles records when no handler is configured anywhere.
    logging.lastResort = OneLineWarning()


def release_held(lost: bool) -> None:
    """Print the connection warnings held back, unless the command ended with the one line
    that says the database was lost (``lost``): then they are dropped."""
    handler = logging.lastResort
    if not isinstance(handler, OneLineWarning):
        return
    held, handler.held = handler.held, []
    if not lost:
        for line in held:
            sys.stderr.write(line)


def connection_lost(exc: BaseException) -> BaseException | None:
    """The driver error in ``exc``'s chain if the database connection failed mid-command
    (the server shut down or terminated it, the network went away)."""
    return connection_error(exc)


def continue_hint(args: list[str]) -> str:
    """How to continue the thread this command was advancing: ``longtask resume THREAD``,
    with ``--db`` when it was given on the line (not when it came from $LONGTASK_DB) and its
    password redacted."""
    import shlex

    from longtask.checkpointers import redact, resolve_url

    if args[:1] == ["migrate"]:
        # A migration is one transaction: one the lost database cut off changed nothing
        # (and with --all, the threads moved already are on the new version, not --from).
        line = scrub_env(f"longtask {shlex.join(args)}")
        if session["db"] is not None:
            from longtask.checkpointers._url import scrub

            line = scrub(line, resolve_url(session["db"]))
        return f"the migration was not made; run `{line}` again"
    thread = session["thread"]
    if thread is None:
        return "run the command again"
    command = f"longtask resume {shlex.quote(thread)}"
    back = ""
    if any(a == "--db" or a.startswith("--db=") for a in args):
        url = resolve_url(session["db"])
        command += f" --db {shlex.quote(redact(url))}"
        if redact(url) != url:
            back = " (with the password in place of ***)"
    return f"the thread keeps every step it finished; continue with `{command}`{back}"


#: SQLite's result code for a write refused because the disk (or the database's page limit)
#: is full; PostgreSQL's SQLSTATE for the same on the server
_SQLITE_FULL = 13
_PG_DISK_FULL = "53100"


def disk_full(exc: BaseException) -> BaseException | None:
    """The error in ``exc``'s chain that says a disk is full: an ``OSError`` ENOSPC/EDQUOT
    (a file of ours: the SQLite journal, an artifact, an export), SQLite's SQLITE_FULL, or
    PostgreSQL's ``disk_full``; else None. Drivers are looked up by attribute, not imported."""
    import errno

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return current
        code = getattr(current, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF == _SQLITE_FULL:
            return current
        if getattr(current, "sqlstate", None) == _PG_DISK_FULL:
            return current
        current = current.__cause__ or current.__context__
    return None


def disk_full_message(exc: BaseException, args: list[str]) -> str:
    """One line: which disk is full, and how to go on once there is room (the thread keeps
    what it committed before the write that failed)."""
    from longtask.checkpointers import redact, resolve_url

    url = resolve_url(session["db"])
    if isinstance(exc, OSError) and exc.filename:
        where = f"no space left for {exc.filename}"
    elif getattr(exc, "sqlstate", None) == _PG_DISK_FULL:
        where = f"the database server of {redact(url)} has no space left"
    else:
        where = f"no space left for the database {redact(url)}"
    if _thread_recorded():
        return f"the disk is full ({where}); {continue_hint(args)} once there is space."
    return f"the disk is full ({where}); free some space, then run the command again."


def _thread_recorded() -> bool:
    """Whether the thread the command worked on got as far as its record (a run whose
    first write failed has nothing to resume). Reading works on a full disk."""
    if session["thread"] is None:
        return False
    try:
        from longtask.runtime._reader import Reader

        with Reader(session["db"]) as reader:
            return reader.db.store.get_thread(session["thread"]) is not None
    except Exception:
        return False


def lost_message(exc: BaseException, args: list[str]) -> str:
    from longtask.checkpointers import redact, resolve_url
    from longtask.checkpointers._url import scrub

    url = resolve_url(session["db"])
    reason = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
    reason = scrub(reason, url).rstrip(".") or "no reason given"
    return (
        f"lost the connection to the database {redact(url)} ({reason}). Once it is reachable "
        f"again, {continue_hint(args)}."
    )


def scrub_env(text: str) -> str:
    """``text`` without the password of $LONGTASK_DB."""
    import os

    from longtask.checkpointers._url import scrub

    url = os.environ.get("LONGTASK_DB")
    return scrub(text, url) if url else text
