"""Commands the CLI prints for people to paste: the one place that makes them pasteable.

A command printed by this process, or named in a message (between backticks, as runtime
errors write them), runs against the same database only if it carries the ``--db`` this
process was given. ``--db`` is kept when it was on the command line and left out when the
database came from ``$LONGTASK_DB`` (or the default), where the pasted command finds it too.
"""

from __future__ import annotations

import re
import shlex

#: the --db given on this process's command line, if any
_db: str | None = None

_IN_TEXT = re.compile(r"`(longtask [^`]+)`")


def remember_db(argv: list[str]) -> None:
    """Note the ``--db`` of this command line (``--db URL`` or ``--db=URL``)."""
    global _db
    _db = None
    for i, arg in enumerate(argv):
        if arg == "--db" and i + 1 < len(argv):
            _db = argv[i + 1]
        elif arg.startswith("--db="):
            _db = arg[len("--db=") :]


def use_db(url: str) -> None:
    """Print ``--db URL`` in every command from now on: a command that chose its database
    itself (``longtask demo --dir D`` uses one inside D) names it in what it prints."""
    global _db
    _db = url


def db_option() -> str:
    """`` --db URL`` (password redacted) when this process was given --db, else ``""``."""
    if not _db:
        return ""
    from longtask.checkpointers import redact

    return f" --db {shlex.quote(redact(_db))}"


def cmd(command: str) -> str:
    """``command`` (``longtask resume T --resume JSON``) as it must be pasted: ``--db`` goes
    after the command's arguments, before its first option or alternative."""
    option = db_option()
    words = command.split(" ")
    if not option or "--db" in words:
        return command
    at = next(
        (i for i, w in enumerate(words) if i > 1 and w[:1] in ("-", "[", "|", "(")), len(words)
    )
    return " ".join([*words[:at], option.strip(), *words[at:]])


def in_text(text: str) -> str:
    """``text`` with every backticked ```longtask ...``` command made pasteable."""
    return _IN_TEXT.sub(lambda m: f"`{cmd(m.group(1))}`", text)
