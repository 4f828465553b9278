"""Who is told when a thread needs a person or ends: ``notify=`` on a LongTask or a step.

Plain data, checked with the rest of a definition: the URLs a JSON notification is POSTed
to, which kinds of moment are told, and after how long an unanswered pause is told again.
Not part of the definition hash: it changes who hears of a thread, not how it runs (as a
task's schedules). Delivery (runtime) also POSTs to the URLs of ``$LONGTASK_NOTIFY``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, field_validator

#: the moments a notification tells of: a pause of each kind (a person's approval, an
#: outside event, a graph step's own interrupt, a budget or deadline reached, a fix loop
#: out of rounds, an effect whose outcome is unknown), then a thread that failed or ended
NOTIFY_KINDS: tuple[str, ...] = (
    "approval",
    "wait",
    "interrupt",
    "budget",
    "deadline",
    "fix",
    "effect",
    "failed",
    "completed",
)
#: the kinds that are pauses (the ones reminders repeat)
PAUSE_NOTIFY_KINDS: frozenset[str] = frozenset(NOTIFY_KINDS[:-2])


def url_problem(value: object, what: str = "webhook") -> str | None:
    """What is wrong with ``value`` as a receiver's URL, without any lookup (None: it has
    the shape of one): an absolute http or https URL with a host, and no space or line
    break."""
    if not isinstance(value, str) or not value:
        return f"{what} must be an http or https URL, not {value!r}"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- a port that is no number raises here
    except ValueError as exc:
        return f"{what} is not a URL: {exc}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = f"{parts.scheme}://{parts.hostname or ''}{parts.path}"
        return (
            f"{what} {shown!r} must be an absolute http or https URL with a host "
            "(https://receiver.example/hook)"
        )
    if any(c in value for c in "\x00\r\n "):
        return f"{what} holds a space, a NUL or a line break"
    return None


class Notify(BaseModel):
    """Where and when to tell of a thread: POST a JSON notification to each of ``urls``
    at the moments in ``on`` (default: every pause, a failure and the end); a pause still
    unanswered ``remind_after`` seconds after it was told is told again, and again after
    each ``remind_after`` more, until it is answered or expires.

    ``notify="https://..."`` and ``notify=[url, ...]`` are short for ``Notify(urls=...)``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    urls: tuple[str, ...] = ()
    remind_after: float | None = None
    on: tuple[str, ...] = NOTIFY_KINDS

    @field_validator("urls", "on", mode="before")
    @classmethod
    def _tuple(cls, v: Any) -> Any:
        return (v,) if isinstance(v, str) else tuple(v) if isinstance(v, Sequence) else v

    @field_validator("remind_after", mode="before")
    @classmethod
    def _seconds(cls, v: Any) -> Any:
        return v.total_seconds() if isinstance(v, timedelta) else v

    def problems(self, where: str) -> list[str]:
        out = [f"{where}: {p}" for u in self.urls if (p := url_problem(u, "notify URL"))]
        if self.remind_after is not None and self.remind_after <= 0:
            out.append(f"{where}: remind_after must be greater than 0 (got {self.remind_after})")
        unknown = [k for k in self.on if k not in NOTIFY_KINDS]
        if unknown:
            out.append(
                f"{where}: notify on {', '.join(map(repr, unknown))} is not a moment longtask "
                f"tells of; choose from {', '.join(NOTIFY_KINDS)}"
            )
        return out


def as_notify(value: Any) -> Any:
    """``notify=`` as given (a URL, a list of URLs, a Notify, a dict) made a Notify; a
    value of any other type is left for pydantic to refuse."""
    if value is None or isinstance(value, Notify):
        return value
    if isinstance(value, str):
        return Notify(urls=(value,))
    if isinstance(value, dict):
        return Notify(**value)
    if isinstance(value, Sequence) and all(isinstance(u, str) for u in value):
        return Notify(urls=tuple(value))
    return value
