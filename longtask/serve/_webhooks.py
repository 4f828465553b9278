"""Run webhooks of the LangGraph Server API: a run created with ``webhook`` is POSTed to that
URL when it ends (success, error, interrupted), as LangGraph's server does.

The URL rules, the POST and the back-off are runtime's (``runtime._delivery``), shared with
the notifications of the run core. The URL is checked when the run is created (http or
https, a host, no loopback, private or link-local address unless
``LONGTASK_WEBHOOK_ALLOW`` names the host: a webhook must not make the server call its
own network for whoever may create a run) and stored with the run.
The executor records the run's end with the thread's values; a ``Deliverer`` of its own
then POSTs it from background threads, at least once: a delivery is claimed in the database
for one attempt, retried with exponential backoff a bounded number of times, and settled
there, so a delivery owed when ``serve`` stopped is made when it starts again. Each attempt
has a timeout and runs beside the runs, never in them: a slow receiver delays neither a
run nor a request (only, for at most a timeout, deliveries queued behind it). The
thread's event log records each outcome (``notify.sent`` / ``notify.failed``) with the URL
shown without its credentials or query string.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException

from longtask._version import __version__
from longtask.runtime._delivery import (
    ALLOW_ENV,
    Failed,
    backoff_wait,
    check_shape,
    post,
    redacted,
    resolve,
    scrub,
)
from longtask.serve.lgapi._json import iso, run_json

if TYPE_CHECKING:
    from longtask.store import Store
    from longtask.store._apiruns import ApiRun, WebhookDue

log = logging.getLogger("longtask.serve")

__all__ = ["ALLOW_ENV", "Deliverer", "WebhookPolicy", "check_url", "payload", "redacted"]

#: the longest webhook URL accepted (as LangGraph's server)
MAX_URL = 4096


@dataclass(frozen=True)
class WebhookPolicy:
    """How run webhooks are delivered: ``attempts`` in all, the n-th retry after
    ``backoff * 2**(n-1)`` seconds (at most ``max_wait``), each attempt given ``timeout``
    seconds per connect, send and read; ``poll``: seconds between looks for deliveries
    owed (a run's end wakes the deliverer at once); ``threads`` deliver side by side."""

    attempts: int = 8
    backoff: float = 2.0
    max_wait: float = 300.0
    timeout: float = 10.0
    poll: float = 1.0
    threads: int = 2


# -- the URL -------------------------------------------------------------------------------


def check_url(value: Any) -> str:
    """A run's ``webhook`` checked, or a 422 saying what is wrong and how to fix it (before
    anything is recorded)."""
    if isinstance(value, str) and len(value) > MAX_URL:
        raise HTTPException(422, f"webhook is longer than {MAX_URL} characters")
    problem = check_shape(value)
    if problem is not None:
        raise HTTPException(422, problem)
    assert isinstance(value, str)
    try:
        resolve(value)
    except ValueError as exc:
        raise HTTPException(422, f"webhook {redacted(value)!r} is refused: {exc}") from None
    return value


# -- the payload ---------------------------------------------------------------------------


def payload(run: ApiRun, values: dict[str, Any] | None) -> dict[str, Any]:
    """What LangGraph's server POSTs: the run object with its final status, when it started
    and ended, when this attempt was sent, the thread's values, and the error of a run that
    failed as ``{"error": ..., "message": ...}``."""
    body: dict[str, Any] = {
        **run_json(run),
        "status": run.status,
        "run_started_at": iso(run.started_at) if run.started_at is not None else None,
        "run_ended_at": iso(run.updated_at),
        "webhook_sent_at": datetime.now(UTC).isoformat(),
        "values": values,
    }
    body.pop("error", None)
    if run.error:
        body["error"] = {"error": "RunError", "message": run.error}
    return body


# -- delivery ------------------------------------------------------------------------------


class Deliverer:
    """Delivers the webhooks of ended runs from threads of its own (see the module doc).
    ``values_of(run)`` gives the thread's values for a run whose end did not keep them."""

    def __init__(
        self,
        store: Store,
        values_of: Callable[[ApiRun], dict[str, Any] | None],
        policy: WebhookPolicy | None = None,
    ) -> None:
        self.store = store
        self.values_of = values_of
        self.policy = policy or WebhookPolicy()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start delivering (once): what is owed, then each run's end as it comes."""
        if self._threads or self._stop.is_set():
            return
        # Daemon threads: stopping serve never waits for a receiver; a delivery cut off is
        # still owed in the database, and made when serve starts again.
        self._threads = [
            threading.Thread(target=self._loop, name=f"longtask-webhook-{i}", daemon=True)
            for i in range(max(1, self.policy.threads))
        ]
        for t in self._threads:
            t.start()

    def wake(self) -> None:
        """A run has ended: look for deliveries now rather than at the next poll."""
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.deliver_due()
            except Exception:
                log.exception("webhook delivery failed")  # the database, say: look again
                busy = False
            if busy:
                continue
            self._wake.wait(self.policy.poll)
            self._wake.clear()

    def deliver_due(self) -> bool:
        """Make one attempt at one due delivery; whether there was one."""
        now = time.time()
        for run_id in self.store.api_webhooks_due(now):
            # Held for longer than an attempt can take (connect, send and read each get the
            # timeout): found due again only if this process died during it.
            until = now + 4 * self.policy.timeout + 5
            due = self.store.api_webhook_claim(run_id, now, until)
            if due is not None:
                self._attempt(due)
                return True
        return False

    def _attempt(self, due: WebhookDue) -> None:
        run, attempt = due.run, due.attempts + 1
        assert run.webhook is not None
        url = redacted(run.webhook)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"longtask/{__version__}",
            # The same on every attempt of this run's delivery: delivery is at least once,
            # and a receiver that keeps the keys it has seen acts once.
            "Idempotency-Key": run.run_id,
        }
        try:
            status = self._send(due, headers)
        except Failed as exc:
            message = scrub(str(exc), run.webhook)
            last = not exc.retry or attempt >= self.policy.attempts
            wait = None if last else self._wait(attempt)
            retry_at = None if wait is None else time.time() + wait
            self.store.api_webhook_settle(run.run_id, attempt, sent=False, retry_at=retry_at)
            self._event(
                run,
                "notify.failed",
                f"{attempt}",
                attempt,
                {"error": message, "retry_in": wait, "final": last},
            )
            log.info("webhook of run %s to %s, attempt %d: %s", run.run_id, url, attempt, message)
            return
        self.store.api_webhook_settle(run.run_id, attempt, sent=True, retry_at=None)
        self._event(run, "notify.sent", "", attempt, {"http_status": status})

    def _send(self, due: WebhookDue, headers: dict[str, str]) -> int:
        run = due.run
        assert run.webhook is not None
        try:
            values = due.values if due.values is not None else self.values_of(run)
            body = json.dumps(payload(run, values), default=str).encode()
            return post(run.webhook, body, headers, self.policy.timeout)
        except Failed:
            raise
        except Exception as exc:
            # Counted as an attempt: a delivery that cannot be made is given up in the end,
            # rather than claimed and found due again for ever.
            log.exception("webhook of run %s", run.run_id)
            raise Failed(f"{type(exc).__name__}: {exc}") from None

    def _wait(self, attempt: int) -> float:
        return backoff_wait(attempt, self.policy.backoff, self.policy.max_wait)

    def _event(self, run: ApiRun, kind: str, key: str, attempt: int, data: dict[str, Any]) -> None:
        assert run.webhook is not None
        try:
            self.store.append_event(
                run.thread_id,
                kind,
                # one notify.sent per run however often it is sent; one failure per attempt
                key=f"{kind}/{run.run_id}/{key}",
                attempt=attempt,
                data={"run_id": run.run_id, "url": redacted(run.webhook), **data},
            )
        except Exception:
            log.exception("could not record %s of run %s", kind, run.run_id)
