"""Who acts: the name a person gives (``--by``, ``by=``), checked, or by default the login
name of the process's user."""

from __future__ import annotations

import getpass

from longtask.errors import InvalidInput

#: the longest name of who acts: it is recorded in events and printed in one line
MAX_BY = 200


def whoami() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name (a container): still say who acted, vaguely
        return "unknown"


def check_by(by: str) -> str:
    """``by``, the name of who acts, if it can be recorded as one: text of one line, at
    most ``MAX_BY`` characters, not blank. The one check of every ``--by`` of the CLI and
    every ``by=`` of the Runner (a newline or a control character in an event's ``by``
    forges lines in ``longtask events`` and the logs)."""
    if not isinstance(by, str) or not by.strip():
        raise InvalidInput(
            f"who acts (--by, by=) must be a name, not {by!r}: it is recorded in the event "
            "(and checked against an approval's approvers)"
        )
    if len(by) > MAX_BY:
        raise InvalidInput(
            f"who acts (--by, by=) is {len(by)} characters long; give a name of at most {MAX_BY}"
        )
    bad = next((c for c in by if not c.isprintable()), None)
    if bad is not None and 0xD800 <= ord(bad) <= 0xDFFF:
        # a byte of the command line that is no UTF-8, decoded by Python to a lone surrogate
        raise InvalidInput(
            f"who acts (--by, by=) {by[:60]!r} holds a byte that is not valid Unicode text; "
            "give the name in UTF-8"
        )
    if bad is not None:
        raise InvalidInput(
            f"who acts (--by, by=) {by[:60]!r} holds {bad!r}; give a name of one line of "
            "printable text, with no control characters"
        )
    return by
