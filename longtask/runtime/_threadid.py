"""The ids a new thread may have."""

from __future__ import annotations

import re

from longtask.errors import InvalidInput

_THREAD_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}")


def check_thread_id(thread_id: str) -> None:
    """Refuse a thread id a new thread may not have (an empty one, a trailing newline...)."""
    if not thread_id:
        raise InvalidInput(
            "the thread id is empty: give one (letters, digits and ._:@-) or leave it out "
            "for a new random id"
        )
    # fullmatch: with match, "$" also matches before a trailing newline ("abc\n").
    if not _THREAD_ID_RE.fullmatch(thread_id):
        raise InvalidInput(
            f"thread id {thread_id!r} is not allowed: use up to 200 letters, digits and "
            "._:@- characters, starting with a letter or digit"
        )
