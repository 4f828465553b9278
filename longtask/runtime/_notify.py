"""Notifications: a JSON POST when a thread starts waiting for a person or an outside event,
fails or completes, to the URLs of the task's (or the step's) ``notify`` and of
``$LONGTASK_NOTIFY``.

Durable and at least once: the notice is an outbox row made by a trigger on the event that
tells of the moment (store._notify), so it commits with that event and the checkpoint it
describes, on every path that stores events; a kill after the commit loses nothing. Each
run of a thread that finds receivers configured records them on the thread (the outbox
gets rows only then), and the trigger copies them into each notice: a notice goes where
its thread's run was configured to send it, whichever process delivers it. The
``Notifier`` of whichever process advances or serves threads (a run, a worker, ``serve``)
delivers after the commit from background threads, one lane per receiver (a slow or
hanging receiver delays only its own notices, and never a thread), each attempt bounded
as a whole by the timeout; what is owed when a process exits is delivered by the next
one, or by ``longtask tick``. Failed attempts are retried with back-off across restarts
(a receiver that took a notice is not sent it again); the ``Idempotency-Key`` header is
the same on every attempt of a notice (a digest of its canonical identity), and the body
is signed (HMAC-SHA256 over timestamp and body) with ``$LONGTASK_NOTIFY_SECRET``, which is
never stored (a notice records only that its run had one). Each attempt is recorded as
``notify.sent`` / ``notify.failed`` (the URL without credentials or query). A pause still
unanswered ``remind_after`` seconds after its last notice is told again (a new notice, its
own key, the same receivers), by the same processes.

URLs are checked as run webhooks are (runtime._delivery): a loopback, private or
link-local address is refused unless ``$LONGTASK_WEBHOOK_ALLOW`` names the host.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from longtask._schema_example import schema_example
from longtask._version import __version__
from longtask.model._canonical import canonical_digest
from longtask.model._notify import PAUSE_NOTIFY_KINDS, url_problem
from longtask.runtime._delivery import Failed, Lanes, backoff_wait, post, redacted, scrub

if TYPE_CHECKING:
    from longtask.checkpointers import Database
    from longtask.model import LongTask
    from longtask.store import ThreadRecord
    from longtask.store._notify import Notification

log = logging.getLogger(__name__)

#: URLs every thread's notices go to, beside the task's: a comma-separated list
NOTIFY_ENV = "LONGTASK_NOTIFY"
#: the key notices are signed with (HMAC-SHA256); never stored, logged or sent
SECRET_ENV = "LONGTASK_NOTIFY_SECRET"
#: where ``longtask serve`` is reached (``https://longtask.example``): notices link to the
#: thread's page there
BASE_URL_ENV = "LONGTASK_BASE_URL"
#: the signature header: ``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">``
SIGNATURE_HEADER = "X-Longtask-Signature"

#: the kind of notice each event makes
KIND_OF_EVENT: dict[str, str] = {
    "approval.required": "approval",
    "wait.started": "wait",
    "interrupt.required": "interrupt",
    "budget.exceeded": "budget",
    "fix.exhausted": "fix",
    "effect.unknown": "effect",
    "longtask.failed": "failed",
    "longtask.completed": "completed",
}


@dataclass(frozen=True)
class NotifyPolicy:
    """How notices are delivered: ``attempts`` in all, the n-th retry after
    ``backoff * 2**(n-1)`` seconds (at most ``max_wait``), each attempt to a receiver
    given ``timeout`` seconds in all (lookup, connect, send and the answer); ``poll``:
    seconds between looks for notices owed and reminders due; ``threads``: attempts in
    flight at once in a process (each to another receiver); ``linger``: how long a
    closing process waits for notices still owed (then the next process or ``longtask
    tick`` sends them)."""

    attempts: int = 10
    backoff: float = 5.0
    max_wait: float = 3600.0
    timeout: float = 10.0
    poll: float = 5.0
    threads: int = 16
    linger: float = 5.0

    @classmethod
    def from_env(cls) -> NotifyPolicy:
        """The defaults, with ``$LONGTASK_NOTIFY_TIMEOUT`` (seconds per attempt) and
        ``$LONGTASK_NOTIFY_BACKOFF`` (seconds before the first retry) when set."""
        out = cls()
        for env, name in (
            ("LONGTASK_NOTIFY_TIMEOUT", "timeout"),
            ("LONGTASK_NOTIFY_BACKOFF", "backoff"),
        ):
            raw = os.environ.get(env)
            if raw:
                try:
                    value = float(raw)
                except ValueError:
                    log.warning("%s=%r is not a number of seconds; ignored", env, raw)
                    continue
                out = NotifyPolicy(**{**out.__dict__, name: value})
        return out


def env_urls() -> list[str]:
    """``$LONGTASK_NOTIFY``'s URLs (those with a bad shape are logged and left out)."""
    urls = []
    for url in (u.strip() for u in os.environ.get(NOTIFY_ENV, "").split(",")):
        if not url:
            continue
        problem = url_problem(url, f"a URL of {NOTIFY_ENV}")
        if problem:
            log.warning("%s", problem)
            continue
        urls.append(url)
    return urls


def receivers_of(task: LongTask | None) -> dict[str, Any] | None:
    """Who a thread of ``task`` tells, as its notices record it (None: nobody): each
    step's and the task's ``notify`` (URLs, and the kinds in its ``on``), then
    ``$LONGTASK_NOTIFY``'s URLs (every kind); ``signed``: the name of the variable of the
    key notices are signed with, if set here (the key itself is never stored)."""
    to: list[dict[str, Any]] = []
    if task is not None:
        for name, s in task.steps.items():
            if s.notify is not None and s.notify.urls:
                to.append({"urls": list(s.notify.urls), "step": name, "on": list(s.notify.on)})
        if task.notify is not None and task.notify.urls:
            to.append({"urls": list(task.notify.urls), "step": None, "on": list(task.notify.on)})
    env = env_urls()
    if env:
        to.append({"urls": env, "step": None, "on": None})
    if not to:
        return None
    return {"to": to, "signed": SECRET_ENV if os.environ.get(SECRET_ENV) else None}


def configured(task: LongTask) -> bool:
    """Whether a thread of ``task`` has anyone to tell (its events then make notices)."""
    return receivers_of(task) is not None


def stored_targets(receivers: dict[str, Any] | None, step: str | None, kind: str) -> list[str]:
    """The URLs of ``receivers`` (``receivers_of``) a notice of ``kind`` about ``step``
    goes to: the step's, the task's (each if its ``on`` has the kind) and the
    environment's, each once."""
    urls: list[str] = []
    for entry in (receivers or {}).get("to", ()):
        if entry.get("step") not in (None, step):
            continue
        on = entry.get("on")
        if on is None or kind in on:
            urls.extend(entry.get("urls", ()))
    return list(dict.fromkeys(urls))


def targets(task: LongTask | None, step: str | None, kind: str) -> list[str]:
    """The URLs a notice of ``kind`` about ``step`` goes to with this process's
    configuration: the step's, the task's (each if its ``on`` has the kind) and
    ``$LONGTASK_NOTIFY``'s, each once."""
    return stored_targets(receivers_of(task), step, kind)


def remind_after(task: LongTask | None, step: str | None) -> float | None:
    """Seconds after which an unanswered pause is told again: the step's, else the
    task's (None: no reminders)."""
    if task is None:
        return None
    found = task.steps.get(step) if step else None
    if found is not None and found.notify is not None and found.notify.remind_after:
        return found.notify.remind_after
    return task.notify.remind_after if task.notify is not None else None


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Longtask-Signature`` value of ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def idempotency_key(thread_id: str, n: Notification) -> str:
    """The same for every attempt of one notice (and another for each reminder): a digest
    of its canonical identity (thread, event, reminder number)."""
    return "lt-" + canonical_digest(
        {"thread": thread_id, "event": n.event_id, "kind": n.kind, "reminder": n.reminder},
        "a notification",
        length=32,
    )


def payload_for(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """What ``url`` is sent: a Slack incoming webhook (``hooks.slack.com``) gets the
    ``text`` alone (the form it shows), any other URL the whole body."""
    if (urlsplit(url).hostname or "").lower() == "hooks.slack.com":
        return {"text": body["text"]}
    return body


@dataclass
class _Round:
    """One attempt at a notice: a part per receiver not yet reached, each in its lane;
    settled when the last part ends."""

    n: Notification
    kind: str
    urls: list[str]
    body: dict[str, Any]
    headers: dict[str, str]
    #: the variable of the key its run signed with (None: unsigned)
    signed: str | None
    #: parts still running (and one for the dispatcher while it starts them)
    left: int = 1
    #: parts that made an attempt
    ran: int = 0
    sent: list[str] = field(default_factory=list)
    failures: list[tuple[str, Failed]] = field(default_factory=list)
    #: lanes it waits for (busy with another notice): its receivers not tried this time
    waits: set[str] = field(default_factory=set)


class Notifier:
    """Delivers a database's notices (see the module doc). ``load(rec)`` gives the task a
    thread runs (for its ``notify``); ``clock`` decides reminders."""

    def __init__(
        self,
        db: Database,
        load: Callable[[ThreadRecord], LongTask],
        clock: Callable[[], datetime],
        policy: NotifyPolicy | None = None,
    ) -> None:
        self.db = db
        self.load = load
        self.clock = clock
        self.policy = policy or NotifyPolicy.from_env()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._lanes = Lanes(self.policy.threads, self._freed)
        #: notices put back until a lane is free: by lane, (event id, reminder) -> the
        #: ``due`` they were put back with
        self._parked: dict[str, dict[tuple[int, int], float]] = {}
        #: tasks this process ran, by definition hash (a notice is told with the task
        #: object at hand rather than one imported again by its reference)
        self._known: dict[str, LongTask] = {}

    # -- the process's side --------------------------------------------------------------

    def thread_runs(self, thread_id: str, task: LongTask) -> bool:
        """A run of ``thread_id`` starts: record who its events' notices go to, if anyone
        is configured here (a run with nobody configured leaves what an earlier run
        recorded); whether they do (then the run's end should ``wake`` this notifier)."""
        to = receivers_of(task)
        if to is None:
            return False
        self._known[task.definition_hash] = task
        self.db.store.notify_enable(thread_id, to)
        return True

    def task_of(self, rec: ThreadRecord) -> LongTask:
        known = self._known.get(rec.definition_hash)
        return known if known is not None else self.load(rec)

    def wake(self) -> None:
        """Something may be owed now: deliver it from the background (started once)."""
        self.start()
        self._wake.set()

    def start(self) -> None:
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            # A daemon thread: a process that exits never waits on a receiver beyond
            # ``linger``; a notice cut off is still owed in the database.
            self._thread = threading.Thread(target=self._loop, name="longtask-notify", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop, after waiting up to ``linger`` seconds for notices owed and due now."""
        if self._thread is not None and not self._stop.is_set():
            deadline = time.monotonic() + self.policy.linger
            self._wake.set()
            while time.monotonic() < deadline:
                try:
                    owed = bool(self.db.store.notify_due(time.time(), 1))
                except Exception:
                    break
                if not self._lanes.in_flight and not owed:
                    break
                time.sleep(0.02)
        self._stop.set()
        self._wake.set()

    def _loop(self) -> None:
        next_remind = 0.0
        while not self._stop.is_set():
            try:
                if time.monotonic() >= next_remind:
                    self.remind()
                    next_remind = time.monotonic() + self.policy.poll
                started = self.dispatch()
            except Exception:
                log.exception("notification delivery failed")  # the database, say: again
                started = 0
            if started:
                continue
            self._wake.wait(self.policy.poll)
            self._wake.clear()

    # -- delivering ---------------------------------------------------------------------

    def deliver_pending(self, within: float = 30.0) -> int:
        """Make reminders due and attempt every notice due now, here (``longtask tick``),
        for at most about ``within`` seconds; how many attempts were made."""
        self.remind()
        end = time.monotonic() + within
        made = 0
        while True:
            made += self.dispatch()
            left = end - time.monotonic()
            if left <= 0:
                break
            if not self._lanes.in_flight and not self.db.store.notify_due(time.time(), 1):
                break
            self._lanes.wait(min(left, 0.05))
        return made

    def deliver_one(self) -> bool:
        """Start attempts at the notices due now; whether there were any."""
        return bool(self.dispatch())

    def dispatch(self) -> int:
        """Claim the notices due now and start an attempt at each of their receivers whose
        lane is free (the others wait for theirs); how many attempts this started (or
        notices found with nobody to tell)."""
        now = time.time()
        store = self.db.store
        self._lanes.limit = max(1, self.policy.threads)
        made = 0
        for event_id, reminder in store.notify_due(now):
            if self._lanes.in_flight >= self._lanes.limit:
                break  # the lane that frees first wakes the loop
            # Held for as long as an attempt can take (each part's deadline is the
            # timeout, and they run side by side): found due again if this process died.
            until = now + self.policy.timeout + 5
            n = store.notify_claim(event_id, reminder, now, until)
            if n is None:
                continue
            r = self._round(n)
            if r is None:
                made += 1
                continue
            made += self._start(r)
        return made

    def _round(self, n: Notification) -> _Round | None:
        """What an attempt at ``n`` sends to whom; None if it has nobody to tell (settled)."""
        store = self.db.store
        kind = KIND_OF_EVENT.get(n.kind, n.kind)
        if n.kind == "budget.exceeded" and str((n.data or {}).get("reason", "")).startswith(
            "deadline"
        ):
            kind = "deadline"
        rec = store.get_thread(n.thread_id)
        urls: list[str] = []
        signed: str | None = None
        if rec is not None and n.receivers is not None:
            urls = stored_targets(n.receivers, n.step, kind)
            signed = n.receivers.get("signed")
        elif rec is not None:
            # A notice stored before its receivers were (migration 27): this process's
            # configuration decides, as it did then.
            task: LongTask | None
            try:
                task = self.task_of(rec)
            except Exception as exc:
                # The code that defines the task is not here: the task's URLs are unknown.
                # Tell $LONGTASK_NOTIFY's, and say so in the log.
                log.warning(
                    "notice of thread %s sent without the task's URLs: %s", n.thread_id, exc
                )
                task = None
            urls = targets(task, n.step, kind)
        if rec is None or not urls:
            store.notify_settle(
                n.event_id, n.reminder, n.attempts + 1, n.sent, state="none", retry_at=None
            )
            return None
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"longtask/{__version__}",
            "Idempotency-Key": idempotency_key(n.thread_id, n),
        }
        return _Round(n, kind, urls, self.body(n, rec, kind), headers, signed)

    def _start(self, r: _Round) -> int:
        started = 0
        for url in r.urls:
            lane = canonical_digest(url, "a URL")
            if lane in r.n.sent:
                continue
            with self._lock:
                r.left += 1
            busy = self._lanes.start(lane, partial(self._part, r, url, lane), "longtask-notice")
            if busy is None:
                started += 1
                continue
            with self._lock:
                r.waits.add(busy)
            self._done(r)
        self._done(r)  # the dispatcher's own share: the round may settle now
        return started

    def _part(self, r: _Round, url: str, lane: str) -> None:
        n = r.n
        try:
            status = self._send(r, url)
        except Failed as exc:
            with self._lock:
                r.ran += 1
                r.failures.append((url, exc))
        except Exception as exc:
            with self._lock:
                r.ran += 1
                r.failures.append((url, Failed(f"{type(exc).__name__}: {exc}")))
        else:
            # the event before the row is settled: a kill between them sends again, with
            # the same key, and records the same event once
            self._event(
                n,
                "notify.sent",
                f"{n.event_id}/{n.reminder}/{lane}",
                n.attempts + 1,
                {"url": redacted(url), "http_status": status, "notice": r.kind},
            )
            with self._lock:
                r.ran += 1
                r.sent.append(lane)
        finally:
            self._done(r)

    def _send(self, r: _Round, url: str) -> int:
        payload = payload_for(url, r.body)
        data = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()
        headers = dict(r.headers)
        secret = os.environ.get(SECRET_ENV)
        if secret:
            headers[SIGNATURE_HEADER] = signature(secret, int(time.time()), data)
        elif r.signed:
            # Its receivers check signatures: sent unsigned, it would be refused (or
            # trusted unsigned). Another process that has the key may send it.
            raise Failed(
                f"not sent: the thread's run signed its notices with ${r.signed}, which is "
                f"not set in this process; set {r.signed} here as it is where the thread runs"
            )
        return post(url, data, headers, self.policy.timeout)

    def _done(self, r: _Round) -> None:
        with self._lock:
            r.left -= 1
            if r.left:
                return
        try:
            self._settle(r)
        except Exception:
            log.exception("could not settle the notice of thread %s", r.n.thread_id)

    def _settle(self, r: _Round) -> None:
        store = self.db.store
        n = r.n
        attempt = n.attempts + (1 if r.ran else 0)
        sent = tuple(n.sent) + tuple(r.sent)
        if not r.failures and not r.waits:
            store.notify_settle(n.event_id, n.reminder, attempt, sent, state="sent", retry_at=None)
            return
        if not r.failures:
            self._park(r, attempt, sent)
            return
        # A notice with receivers still to try is not given up for the others' failures.
        last = not r.waits and (
            attempt >= self.policy.attempts or not any(f.retry for _, f in r.failures)
        )
        wait = None if last else backoff_wait(attempt, self.policy.backoff, self.policy.max_wait)
        for url, failed in r.failures:
            message = scrub(str(failed), url)
            self._event(
                n,
                "notify.failed",
                f"{n.event_id}/{n.reminder}/{canonical_digest(url, 'a URL')}/{attempt}",
                attempt,
                {
                    "url": redacted(url),
                    "error": message,
                    "retry_in": wait,
                    "final": last,
                    "notice": r.kind,
                },
            )
            log.info(
                "notice of thread %s to %s, attempt %d: %s",
                n.thread_id,
                redacted(url),
                attempt,
                message,
            )
        store.notify_settle(
            n.event_id,
            n.reminder,
            attempt,
            sent,
            state="failed" if last else None,
            retry_at=None if wait is None else time.time() + wait,
        )

    def _park(self, r: _Round, attempt: int, sent: tuple[str, ...]) -> None:
        """Put ``r``'s notice back until a lane it waits for is free (then ``_freed``
        makes it due), at the latest when an attempt there must have ended."""
        n = r.n
        due = time.time() + self.policy.timeout + 5
        self.db.store.notify_settle(n.event_id, n.reminder, attempt, sent, state=None, retry_at=due)
        with self._lock:
            for lane in r.waits:
                self._parked.setdefault(lane, {})[(n.event_id, n.reminder)] = due
        # A lane that freed meanwhile found nothing parked: look again.
        for lane in r.waits:
            if not self._lanes.busy(lane):
                self._freed(lane)

    def _freed(self, lane: str) -> None:
        """An attempt in ``lane`` ended: what waited for it (or for any lane, when all
        were taken) is due now."""
        with self._lock:
            waiting = {**self._parked.pop(lane, {}), **self._parked.pop(Lanes.ANY, {})}
        now = time.time()
        for (event_id, reminder), due in waiting.items():
            try:
                self.db.store.notify_hurry(event_id, reminder, due, now)
            except Exception:
                log.exception("could not make a parked notice due")  # due at ``due``
        self._wake.set()

    def _event(
        self, n: Notification, kind: str, key: str, attempt: int, data: dict[str, Any]
    ) -> None:
        try:
            self.db.store.append_event(
                n.thread_id,
                kind,
                key=f"{kind}/{key}",
                step=n.step,
                attempt=attempt,
                data={"event_id": n.event_id, "reminder": n.reminder, **data},
            )
        except Exception:
            log.exception("could not record %s of thread %s", kind, n.thread_id)

    # -- reminders ----------------------------------------------------------------------

    def remind(self) -> int:
        """Owe a reminder of each pause still unanswered ``remind_after`` seconds after its
        last notice was made (once that one was sent); how many this call made."""
        store = self.db.store
        now = self.clock().timestamp()
        made = 0
        for n in store.notify_unanswered():
            rec = store.get_thread(n.thread_id)
            if rec is None or n.settled_at is None:
                continue
            try:
                task = self.task_of(rec)
            except Exception:
                continue
            every = remind_after(task, n.step)
            # From when the last notice was made, on the runner's clock (the pause's event
            # time for the first): one reminder per ``remind_after`` however long a
            # delivery took.
            if every is None or now < n.created_at + every:
                continue
            if not _still_open(rec, n):
                continue
            if store.notify_remind(n, now):
                made += 1
        if made:
            self._wake.set()
        return made

    # -- the body -----------------------------------------------------------------------

    def command_db(self) -> str:
        """`` --db URL`` for the commands a notice holds (a person pastes them elsewhere);
        a password is shown redacted (give it through ``$PGPASSWORD`` or ``~/.pgpass``)."""
        url = self.db.url
        if url.scheme == "sqlite" and url.path is not None:
            return f" --db {shlex.quote(f'sqlite:///{url.path.resolve()}')}"
        return f" --db {shlex.quote(url.redacted)}"

    def body(self, n: Notification, rec: ThreadRecord, kind: str) -> dict[str, Any]:
        """The JSON a notice POSTs (see docs/howto/notifications.md)."""
        data = dict(n.data or {})
        t = rec.thread_id
        db = self.command_db()
        asked: dict[str, Any] = {}
        who: list[str] | None = None
        commands: list[str] = []
        step = n.step or ""
        if kind == "approval":
            asked = {"plan": data.get("plan"), "plan_hash": data.get("plan_hash")}
            if data.get("tool"):
                asked["tool"] = data.get("tool")
            who = data.get("approvers")
            by = shlex.quote((who or ["NAME"])[0])
            plan = f" --plan-hash {data['plan_hash']}" if data.get("plan_hash") else ""
            commands = [
                f"longtask approve {t} {step}{db} --by {by}{plan}",
                f"longtask reject {t} {step}{db} --by {by} --comment WHY",
            ]
        elif kind == "wait":
            schema = data.get("schema")
            example = schema_example(schema) if isinstance(schema, dict) else {}
            asked = {"schema": schema, "example": example}
            payload = shlex.quote(json.dumps(example, ensure_ascii=False))
            commands = [f"longtask signal {t} {step}{db} --payload {payload}"]
        elif kind == "interrupt":
            asked = {"value": data.get("value"), "interrupt_id": data.get("interrupt_id")}
            commands = [
                # the graph decides what its interrupt() takes: put your answer's JSON here
                f"longtask resume {t}{db} --interrupt {data.get('interrupt_id')} --resume '{{}}'"
            ]
        elif kind in ("budget", "deadline"):
            asked = {
                "reason": data.get("reason"),
                "limits": data.get("limits"),
                "used": data.get("used"),
            }
            raise_it = "--extend-deadline 3600" if kind == "deadline" else "--add-tokens 100000"
            commands = [f"longtask budget {t}{db} {raise_it}", f"longtask resume {t}{db}"]
        elif kind == "fix":
            asked = {"rounds": data.get("rounds"), "failure": data.get("failure")}
            commands = [f"longtask resume {t}{db}"]
        elif kind == "effect":
            key = data.get("key")
            asked = {k: data.get(k) for k in ("key", "name", "args") if k in data}
            commands = [
                f"longtask effects resolve {t} {key}{db} --succeeded",
                f"longtask effects resolve {t} {key}{db} --failed",
                f"longtask effects resolve {t} {key}{db} --retry",
            ]
        elif kind == "failed":
            asked = {"error": data}
            commands = [f"longtask retry {t}{db}"]
        elif kind == "completed":
            commands = [f"longtask result {t}{db}"]
        base = os.environ.get(BASE_URL_ENV, "").rstrip("/")
        page = f"{base}/threads/{t}" if base else None
        deadline = data.get("deadline")
        body: dict[str, Any] = {
            "kind": kind,
            "event": n.kind,
            "reminder": n.reminder,
            "thread_id": t,
            "task": rec.task_name,
            "version": rec.task_version,
            "step": n.step,
            "stage": n.stage,
            "asked": asked,
            "who": who,
            "deadline": deadline,
            "page": page,
            "command": commands[0] if commands else None,
            "commands": commands,
            "at": datetime.fromtimestamp(n.ts or n.created_at, UTC).isoformat(),
        }
        body["text"] = _text(body)
        return body


def _text(body: dict[str, Any]) -> str:
    """The essentials on a few lines (Slack's incoming webhooks show ``text``)."""
    kind = body["kind"]
    what = {
        "approval": "waits for an approval",
        "wait": "waits for an outside event",
        "interrupt": "waits for an answer to its graph's interrupt",
        "budget": "stopped: its budget is used up",
        "deadline": "stopped: its deadline has passed",
        "fix": "stopped: its fix rounds are used up",
        "effect": "stopped: an effect's outcome is unknown",
        "failed": "failed",
        "completed": "completed",
    }.get(kind, kind)
    again = f" (reminder {body['reminder']})" if body["reminder"] else ""
    at = f" at step {body['step']}" if body["step"] and kind in PAUSE_NOTIFY_KINDS else ""
    lines = [f"{body['task']} v{body['version']}, thread {body['thread_id']}{at} {what}{again}"]
    asked = body["asked"]
    if kind == "approval" and asked.get("plan_hash"):
        lines.append(f"plan hash {asked['plan_hash']}")
    if body["who"]:
        lines.append("who may answer: " + ", ".join(body["who"]))
    if body["deadline"]:
        lines.append(f"deadline: {body['deadline']}")
    if body["page"]:
        lines.append(body["page"])
    if body["command"]:
        lines.append(f"`{body['command']}`")
    return "\n".join(lines)


def _still_open(rec: ThreadRecord, n: Notification) -> bool:
    """Whether the pause ``n`` tells of still waits: the thread waits at its step."""
    return any(w.get("step") == n.step for w in rec.waiting or ())
