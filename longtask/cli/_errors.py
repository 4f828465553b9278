"""How the CLI reports what stopped a command: Ctrl-C, a lost database connection, log
warnings. ``longtask.cli._app._dispatch`` is the one place that prints them."""

from __future__ import annotations

import logging
import sys
from typing import Any

from typer.core import TyperGroup

from longtask.errors import connection_error

#: what the running command works on, for the message if it is stopped mid-way
session: dict[str, str | None] = {"db": None, "thread": None}


class Interrupted(Exception):
    """Ctrl-C during a command, carried past Typer (which would exit 130 silently) to the
    one place that prints how to continue."""


class Group(TyperGroup):
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise Interrupted() from exc


class OneLineWarning(logging.Handler):
    """Python's last-resort log handler, one line per record and no traceback (--debug
    keeps the tracebacks): what went wrong reaches the user as the command's own error.
    Used only while nothing configured logging (``longtask worker`` does)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if not record.name.startswith("longtask") and record.levelno < logging.ERROR:
            return  # a driver's own notes (a pool discarding a closed connection)
        text = record.getMessage().strip().splitlines()[0] if record.getMessage() else ""
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and str(exc).strip():
            text += f": {str(exc).strip().splitlines()[0]}"
        try:
            sys.stderr.write(f"warning: {scrub_env(text)}\n")
        except Exception:
            self.handleError(record)


def one_line_warnings() -> None:
    # lastResort only handles records when no handler is configured anywhere.
    logging.lastResort = OneLineWarning()


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
