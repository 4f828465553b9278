"""Notifications: a JSON POST when a thread starts waiting for a person or an outside event,
fails or completes, to the URLs of the task's (or the step's) ``notify`` and of
``$LONGTASK_NOTIFY``.

Durable and at least once: the notice is an outbox row made by a trigger on the event that
tells of the moment (store._notify), so it commits with that event and the checkpoint it
describes, on every path that stores events; a kill after the commit loses nothing. Each
run of a thread first records whether notifications are configured for it (the outbox
gets rows only then). The ``Notifier`` of whichever process advances or serves threads
(a run, a worker, ``serve``) delivers after the commit from background threads, with a
timeout on each attempt, so a slow or hanging receiver never delays a thread; what is
owed when a process exits is delivered by the next one, or by ``longtask tick``. Failed
attempts are retried with back-off across restarts; the ``Idempotency-Key`` header is the
same on every attempt of a notice (a digest of its canonical identity), and the body is
signed (HMAC-SHA256 over timestamp and body) with ``$LONGTASK_NOTIFY_SECRET``. Each
attempt is recorded as ``notify.sent`` / ``notify.failed`` (the URL without credentials
or query). A pause still unanswered ``remind_after`` seconds after its last notice is
told again (a new notice, its own key), by the same processes.

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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from longtask._schema_example import schema_example
from longtask._version import __version__
from longtask.model._canonical import canonical_digest
from longtask.model._notify import PAUSE_NOTIFY_KINDS, url_problem
from longtask.runtime._delivery import Failed, backoff_wait, post, redacted, scrub

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
    ``backoff * 2**(n-1)`` seconds (at most ``max_wait``), each attempt given ``timeout``
    seconds per connect, send and read; ``poll``: seconds between looks for notices owed
    and reminders due; ``linger``: how long a closing process waits for notices still
    owed (then the next process or ``longtask tick`` sends them)."""

    attempts: int = 10
    backoff: float = 5.0
    max_wait: float = 3600.0
    timeout: float = 10.0
    poll: float = 5.0
    threads: int = 2
    linger: float = 5.0

    @classmethod
    def from_env(cls) -> NotifyPolicy:
        """The defaults, with ``$LONGTASK_NOTIFY_TIMEOUT`` (seconds per attempt) and
        ``$LONGTASK_NOTIFY_BACKOFF`` (seconds before the first retry) when set."""
        out = cls()
        for env, field in (
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
                out = NotifyPolicy(**{**out.__dict__, field: value})
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


def configured(task: LongTask) -> bool:
    """Whether a thread of ``task`` has anyone to tell (its events then make notices)."""
    return bool(
        env_urls()
        or (task.notify is not None and task.notify.urls)
        or any(s.notify is not None and s.notify.urls for s in task.steps.values())
    )


def targets(task: LongTask | None, step: str | None, kind: str) -> list[str]:
    """The URLs a notice of ``kind`` about ``step`` goes to: the step's, the task's (each
    if its ``on`` has the kind) and ``$LONGTASK_NOTIFY``'s, each once."""
    urls: list[str] = []
    if task is not None:
        found = task.steps.get(step) if step else None
        for cfg in (found.notify if found is not None else None, task.notify):
            if cfg is not None and kind in cfg.on:
                urls.extend(cfg.urls)
    urls.extend(env_urls())
    return list(dict.fromkeys(urls))


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
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        #: attempts in flight in this process
        self._busy = 0
        #: tasks this process ran, by definition hash (a notice is told with the task
        #: object at hand rather than one imported again by its reference)
        self._known: dict[str, LongTask] = {}

    # -- the process's side --------------------------------------------------------------

    def thread_runs(self, thread_id: str, task: LongTask) -> bool:
        """A run of ``thread_id`` starts: record whether its events make notices; whether
        they do (then the run's end should ``wake`` this notifier)."""
        on = configured(task)
        if on:
            self._known[task.definition_hash] = task
            self.db.store.notify_enable(thread_id, True)
        return on

    def task_of(self, rec: ThreadRecord) -> LongTask:
        known = self._known.get(rec.definition_hash)
        return known if known is not None else self.load(rec)

    def wake(self) -> None:
        """Something may be owed now: deliver it from the background (started once)."""
        self.start()
        self._wake.set()

    def start(self) -> None:
        with self._lock:
            if self._threads or self._stop.is_set():
                return
            # Daemon threads: a process that exits never waits on a receiver beyond
            # ``linger``; a notice cut off is still owed in the database.
            self._threads = [
                threading.Thread(target=self._loop, name=f"longtask-notify-{i}", daemon=True)
                for i in range(max(1, self.policy.threads))
            ]
            for t in self._threads:
                t.start()

    def close(self) -> None:
        """Stop, after waiting up to ``linger`` seconds for notices owed and due now."""
        if self._threads and not self._stop.is_set():
            deadline = time.monotonic() + self.policy.linger
            self._wake.set()
            while time.monotonic() < deadline:
                with self._lock:
                    busy = self._busy
                try:
                    owed = bool(self.db.store.notify_due(time.time(), 1))
                except Exception:
                    break
                if not busy and not owed:
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
                busy = self.deliver_one()
            except Exception:
                log.exception("notification delivery failed")  # the database, say: again
                busy = False
            if busy:
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
        while time.monotonic() < end and self.deliver_one():
            made += 1
        return made

    def deliver_one(self) -> bool:
        """Make one attempt at one due notice; whether there was one."""
        now = time.time()
        store = self.db.store
        for event_id, reminder in store.notify_due(now):
            # Held for as long as an attempt at one target can take (connect, send and read
            # each get the timeout): found due again if this process died in it (or, with
            # several slow targets, while it goes on: at least once, the key dedupes).
            until = now + 3 * self.policy.timeout + 2
            n = store.notify_claim(event_id, reminder, now, until)
            if n is None:
                continue
            with self._lock:
                self._busy += 1
            try:
                self._attempt(n)
            finally:
                with self._lock:
                    self._busy -= 1
            return True
        return False

    def _attempt(self, n: Notification) -> None:
        store = self.db.store
        attempt = n.attempts + 1
        kind = KIND_OF_EVENT.get(n.kind, n.kind)
        if n.kind == "budget.exceeded" and str((n.data or {}).get("reason", "")).startswith(
            "deadline"
        ):
            kind = "deadline"
        rec = store.get_thread(n.thread_id)
        if rec is None:
            store.notify_settle(
                n.event_id, n.reminder, attempt, n.sent, state="none", retry_at=None
            )
            return
        task: LongTask | None
        try:
            task = self.task_of(rec)
        except Exception as exc:
            # The code that defines the task is not here: the task's URLs are unknown.
            # Tell $LONGTASK_NOTIFY's, and say so in the log.
            log.warning("notice of thread %s sent without the task's URLs: %s", n.thread_id, exc)
            task = None
        urls = targets(task, n.step, kind)
        if not urls:
            store.notify_settle(
                n.event_id, n.reminder, attempt, n.sent, state="none", retry_at=None
            )
            return
        body = self.body(n, rec, task, kind)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"longtask/{__version__}",
            "Idempotency-Key": idempotency_key(n.thread_id, n),
        }
        sent = list(n.sent)
        failures: list[tuple[str, Failed]] = []
        for url in urls:
            digest = canonical_digest(url, "a URL")
            if digest in sent:
                continue
            shown = redacted(url)
            payload = payload_for(url, body)
            data = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()
            sent_headers = dict(headers)
            secret = os.environ.get(SECRET_ENV)
            if secret:
                sent_headers[SIGNATURE_HEADER] = signature(secret, int(time.time()), data)
            try:
                status = post(url, data, sent_headers, self.policy.timeout)
            except Failed as exc:
                failures.append((url, exc))
                continue
            except Exception as exc:
                failures.append((url, Failed(f"{type(exc).__name__}: {exc}")))
                continue
            sent.append(digest)
            self._event(
                n,
                "notify.sent",
                f"{n.event_id}/{n.reminder}/{digest}",
                attempt,
                {"url": shown, "http_status": status, "notice": kind},
            )
        if not failures:
            store.notify_settle(
                n.event_id, n.reminder, attempt, tuple(sent), state="sent", retry_at=None
            )
            return
        last = attempt >= self.policy.attempts or not any(f.retry for _, f in failures)
        wait = None if last else backoff_wait(attempt, self.policy.backoff, self.policy.max_wait)
        for url, failed in failures:
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
                    "notice": kind,
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
            tuple(sent),
            state="failed" if last else None,
            retry_at=None if wait is None else time.time() + wait,
        )

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

    def body(
        self, n: Notification, rec: ThreadRecord, task: LongTask | None, kind: str
    ) -> dict[str, Any]:
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
