"""Commands ``longtask serve`` prints for people to paste (on its page and in its error
bodies), made to run against the database the server uses.

The server's reader pastes into a shell of their own, where neither the server's ``--db``
nor its ``$LONGTASK_DB`` is set, and which may be in another directory: any database but the
default is named, with a relative SQLite path made absolute and a password redacted.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from longtask.checkpointers import DEFAULT_URL, redact

_IN_TEXT = re.compile(r"`(longtask [^`]+)`")


def db_option_for(url: str) -> str:
    """``--db URL`` for a server on ``url`` (the resolved URL), or ``""`` for the default."""
    if url == DEFAULT_URL:
        return ""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        url = "sqlite:///" + str(Path(url[len("sqlite:///") :]).resolve())
    return f"--db {shlex.quote(redact(url))}"


class Hints:
    """Pasteable commands for one server's database."""

    def __init__(self, url: str) -> None:
        #: ``--db URL`` (or ``""``), as the page puts it into the commands it shows
        self.db_option = db_option_for(url)

    def cmd(self, command: str) -> str:
        """``command`` with ``--db`` after its arguments, before its first option or
        alternative (as the CLI's own hints place it)."""
        words = command.split(" ")
        if not self.db_option or "--db" in words or "--help" in words:
            return command
        at = next(
            (i for i, w in enumerate(words) if i > 1 and w[:1] in ("-", "[", "|", "(")),
            len(words),
        )
        return " ".join([*words[:at], self.db_option, *words[at:]])

    def in_text(self, text: str) -> str:
        """``text`` with every backticked ```longtask ...``` command made pasteable."""
        return _IN_TEXT.sub(lambda m: f"`{self.cmd(m.group(1))}`", text)
