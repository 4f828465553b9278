"""The ``owner`` key of metadata, with built-in tokens: ownership is the stored column
(whoever created the thread), never the metadata, but LangGraph's owner-only auth handler
keys ownership on ``metadata["owner"]``, and so would a deployment that later moves to such
a handler, an Agent Chat UI filtering on it, or a person reading the thread. So a user may
not write an ``owner`` that names anyone but the thread's owner: bob cannot plant a thread
in alice's list by metadata, or hand his own to her.

With LangGraph's auth handlers the handler decides (its ``create``/``update``/``create_run``
see and may rewrite the metadata; the docs' owner-only handler stamps its caller)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException

#: the metadata key LangGraph's owner-only auth handler keys ownership on
OWNER_KEY = "owner"


def check_owner_key(metadata: Any, owner: str | None, what: str) -> None:
    """Refuse (403) ``metadata`` whose ``owner`` names anyone but ``owner``, who owns
    ``what`` (a thread, a run)."""
    if not isinstance(metadata, Mapping) or OWNER_KEY not in metadata:
        return
    given = metadata[OWNER_KEY]
    if owner is not None and given == owner:
        return
    whose = f"{owner!r}'s" if owner is not None else "no one's (it was stored before owners were)"
    raise HTTPException(
        403,
        f"metadata {OWNER_KEY!r} is {given!r}, but {what} is {whose}: ownership is not "
        "metadata, and does not move; leave out the owner key, or give the owner's name",
    )
