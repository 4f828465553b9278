"""MkDocs hooks: the reference pages' generated parts, made from the code at build time.

A page holds a marker line ``<!-- generated: NAME -->`` and this hook replaces it with what
the code says now: the command line's ``--help`` of every command (from the typer app), the
event kinds (from ``longtask.store._kinds``), the HTTP routes (from the Starlette app
``longtask serve`` builds, and the Server API endpoints it answers as unserved). A kind,
command or route the page does not describe fails the build (``mkdocs build --strict``
turns this hook's errors into a failed build), so the reference cannot drift from the code.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)


class GenerationError(Exception):
    """A generated part found the code and the page disagreeing."""


# -- the command line --------------------------------------------------------------------


def _help(args: list[str]) -> str:
    from typer.testing import CliRunner

    from longtask.cli import app

    result = CliRunner().invoke(
        app,
        [*args, "--help"],
        prog_name="longtask",
        env={"TERMINAL_WIDTH": "100", "NO_COLOR": "1", "COLUMNS": "100"},
    )
    if result.exit_code != 0:
        raise GenerationError(f"longtask {' '.join(args)} --help failed: {result.output}")
    return result.output.rstrip()


def _commands(group: Any, prefix: list[str]) -> list[list[str]]:
    """Every command path under a group, in --help's order (typer carries its own copy of
    click, so a group is told by its ``commands``, not by click's class)."""
    paths: list[list[str]] = []
    for name, command in group.commands.items():
        if getattr(command, "hidden", False):
            continue
        path = [*prefix, name]
        paths.append(path)
        if isinstance(getattr(command, "commands", None), dict):
            paths.extend(_commands(command, path))
    return paths


def cli_reference() -> str:
    import typer.main

    from longtask.cli import app

    root = typer.main.get_command(app)
    parts = ["## longtask", "", "```text", _help([]), "```", ""]
    for path in _commands(root, []):
        name = " ".join(path)
        parts += [f"## longtask {name}", "", "```text", _help(path), "```", ""]
    return "\n".join(parts)


# -- event kinds ---------------------------------------------------------------------------

#: what each kind tells; a kind the code writes and this does not describe fails the build
EVENT_NOTES: dict[str, str] = {
    "longtask.started": "a thread started (task, version, inputs)",
    "longtask.completed": "every step is done; commits with the status `completed`",
    "longtask.failed": "a step failed for good (or a pause's timeout or rejection failed it)",
    "longtask.cancelled": "a cancel finished, listing the compensations that ran",
    "longtask.recovered": "a run took over a thread left `running` by a process that died",
    "stage.started": "the first step of a stage started",
    "stage.completed": "every step of a stage is done",
    "step.started": "an attempt of a step started (attempt number)",
    "step.progress": "a step's `ctx.progress` report, or a map step's items done/total",
    "step.completed": "a step returned; commits with the checkpoint that holds its result",
    "step.failed": "a step failed for good (error, class, attempt)",
    "step.retry": "an attempt failed: error class, message, wait, outcome",
    "step.skipped": "a step was skipped (by `skip`, a timeout's goto, or deferred by a pause)",
    "step.abandoned": "an attempt that a dead process had started and not ended",
    "agent.run.started": "an agent step's run began",
    "agent.run.completed": "an agent step's run ended",
    "model.call": "one model call: models, prompt, tokens, cost, latency, finish reason "
    "(a graph step's: the namespace of the node that made it)",
    "tool.call": "one tool call of an agent step",
    "effect.started": "an effect's ledger row was committed before the call",
    "effect.succeeded": "an effect's call returned; its result is recorded",
    "effect.failed": "an effect's call raised",
    "effect.unknown": "an effect was found `started` with no outcome (the call was cut off)",
    "approval.required": "an approval's request: plan, plan hash, approvers, deadline",
    "approval.resolved": "an approval was decided: by whom, approved or not, comment",
    "approval.expired": "a decision older than `valid_for`, or a passed deadline",
    "approval.refused": "an answer given through LangGraph's own API that failed the checks",
    "interrupt.required": "a graph step's own graph stopped at an interrupt (its id, what it asks)",
    "interrupt.resolved": "a graph step's interrupt was answered: by whom, with what",
    "interrupt.refused": "a graph step's graph raised on an answer: the same interrupt asks "
    "again (its id, the error's type and message)",
    "wait.started": "a wait for an outside event began",
    "subtask.started": "a sub-task step started a child thread (its id, item and attempt)",
    "subtask.completed": "a child thread of a sub-task step completed; once per child",
    "subtask.failed": "a child thread of a sub-task step failed or was cancelled; once per child",
    "wait.resolved": "the outside event arrived (its payload, who delivered it)",
    "wait.expired": "a wait's deadline passed",
    "wait.refused": "a payload given through LangGraph's own API that failed the checks",
    "compensation.started": "a completed step's compensation began (cancel)",
    "compensation.completed": "a compensation finished",
    "compensation.failed": "a compensation raised",
    "budget.exceeded": "a limit (tokens, cost, tool calls, wall time, deadline) was reached",
    "artifact.created": "`ctx.artifact` stored a file",
    "fix.round": "a fix loop's agent ran after a failure (round number)",
    "fix.exhausted": "a fix loop ran out of rounds",
    "definition.migrated": "`longtask migrate` moved the thread to another version (the plan)",
    "definition.forced": "a resume with `--allow-changed-definition` went on under changed code",
    "turn.started": "a new input on a served LangGraph graph's thread: its graph runs again "
    "on its state (`resume --input`, `runner.run_again`, a new run with input)",
    "notify.sent": "a notice (a pause, a failure, the end; see Notifications) or a run's "
    "webhook was delivered: URL without credentials or query string, HTTP status, attempt; "
    "recorded once per URL however often it is sent",
    "notify.failed": "an attempt to deliver a notice or a run's webhook failed: why, the wait "
    "before the next attempt, or `final` when it was the last",
    "manual.skip": "a person marked a step done with a result (`longtask skip`)",
    "manual.retry": "a person ran a failed step again, or asked a pause again",
    "manual.resolve": "a person settled an effect whose outcome was unknown",
    "manual.fork": "a person forked the thread at a past checkpoint",
    "manual.copy": "the thread was made as a copy of another (`threads.copy`): `from`, `by`",
    "manual.cancel": "a person cancelled the thread",
    "manual.budget": "a person raised a limit (`longtask budget --add-...`)",
    "manual.goto": "a goto was carried out (`resume --goto`, a run's `command.goto`): `by`, "
    "`goto`, and the pending pauses it went past (`--skip-pending`)",
    "manual.update": "a write from outside a step's node passed the gate: its door, the "
    "steps and channels it set, `as_node`, who (committed with the checkpoint it made)",
}

#: kinds described above before the code writes them; the table shows a kind only once
#: longtask/store/_kinds.py lists it
COMING: frozenset[str] = frozenset()


def event_reference() -> str:
    from longtask.store._kinds import EVENT_KINDS, LIVE_KINDS

    missing = [k for k in EVENT_KINDS if k not in EVENT_NOTES]
    extra = [k for k in EVENT_NOTES if k not in EVENT_KINDS and k not in COMING]
    if missing or extra:
        raise GenerationError(
            f"docs/hooks.py EVENT_NOTES disagrees with longtask/store/_kinds.py: "
            f"undescribed {missing}, no longer written {extra}"
        )
    rows = ["| kind | stored | what it tells |", "|---|---|---|"]
    for kind in EVENT_KINDS:
        stored = "live, within a second" if kind in LIVE_KINDS else "with the work it describes"
        rows.append(f"| `{kind}` | {stored} | {EVENT_NOTES[kind]} |")
    return "\n".join(rows)


# -- HTTP routes ---------------------------------------------------------------------------


#: what each authorization rule of a route (longtask.serve.access) lets through
RULES = {
    "public": "anyone",
    "page": "anyone (the page); else who may read the thread",
    "signed in": "any caller with a token",
    "read": "who may see the thread (lists: filtered)",
    "answer": "the owner, an admin, an approver the pause names",
    "act": "the owner or an admin (new threads: not a viewer)",
    "copy": "who may see the thread in their own right (not a viewer: a copy is a new thread)",
    "everything": "admins and viewers",
}


def _served_routes() -> list[tuple[str, str, str]]:
    """(methods, path, rule) of every route ``longtask serve`` answers, from the app itself (built
    over a scratch SQLite file: nothing is served, no lifespan runs)."""
    from starlette.routing import Route

    from longtask import Runner
    from longtask.serve._app import create_app
    from longtask.serve.access import Rule, rule_of
    from longtask.serve.lgapi._unserved import UNSERVED

    unserved = {path for path, _, _, _ in UNSERVED}
    found = []
    with (
        tempfile.TemporaryDirectory() as scratch,
        Runner(f"sqlite:///{Path(scratch) / 'routes.db'}") as runner,
    ):
        for route in create_app(runner, schedule_poll=None).routes:
            if not isinstance(route, Route):
                continue
            rule = rule_of(route)
            if route.path in unserved and rule is Rule.SIGNED_IN:
                continue  # answered as unserved: the next table lists it
            methods = sorted((route.methods or set()) - {"HEAD"})
            found.append((" ".join(methods), route.path, RULES[rule.value] if rule else "nobody"))
    return found


def http_routes() -> str:
    rows = ["| method | path | API | who may |", "|---|---|---|---|"]
    for methods, path, who in _served_routes():
        if path.startswith("/api/"):
            api = "JSON API"
        elif path in ("/", "/threads/{thread_id}", "/favicon.ico"):
            api = "web page" if path != "/threads/{thread_id}" else "web page / Server API"
        elif path in ("/ok", "/info"):
            api = "health / server info"
        else:
            api = "LangGraph Server API"
        rows.append(f"| {methods} | `{path}` | {api} | {who} |")
    return "\n".join(rows)


def http_unserved() -> str:
    from longtask.serve.lgapi._unserved import UNSERVED

    if not UNSERVED:
        return "None: longtask serves every endpoint of LangGraph's Server API it knows."
    rows = ["| method | path | answer | what to use instead |", "|---|---|---|---|"]
    for path, methods, status, message in UNSERVED:
        rows.append(f"| {' '.join(methods)} | `{path}` | {status} | {message} |")
    return "\n".join(rows)


# -- the Runner's methods ------------------------------------------------------------------

#: Runner methods that serve longtask's own processes (serve, workers, the CLI), not users
RUNNER_INTERNAL = frozenset(
    {
        "record_cancel",
        "retry_target",
        "check_skip",
        "served_by_workers",
        "enqueue",
        "wake",
        "lease",
        "subtask_ended",
        "subtask_sweep",
        "close_queue",
        "start_fired",
        "wait_events",
        "report_document",
    }
)

#: the heading of each of the Runner's parts
RUNNER_PARTS = {
    "engine": "Starting and resuming",
    "turns": "A new input for a served graph",
    "streams": "Streams and asyncio",
    "reads": "Reading threads",
    "pauses": "Answering pauses",
    "control": "Cancel, retry, skip, budget",
    "watch": "Following and artifacts",
    "travel": "Time travel",
    "queue": "Workers",
    "reports": "Charts and reports",
    "moves": "Export and import",
    "copies": "Copying threads",
    "retention": "Pruning and deleting",
    "scheduler": "Schedules",
    "migrations": "Versions and migrations",
    "notifier": "Notifications",
}


def runner_methods() -> str:
    """Each of the Runner's methods is one of its parts' (``Runner.approve`` is
    ``Pauses.approve``): static analysis sees only ``via(...)`` attributes, so each method is
    rendered from the part's method, under the Runner's name."""
    from longtask._runner import Runner, _Via

    by_part: dict[str, list[str]] = {}
    for name, value in vars(Runner).items():
        if isinstance(value, _Via) and name not in RUNNER_INTERNAL:
            by_part.setdefault(value.part, []).append(name)
    unknown = sorted(set(by_part) - set(RUNNER_PARTS))
    if unknown:
        raise GenerationError(f"docs/hooks.py RUNNER_PARTS lacks a heading for {unknown}")
    parts: list[str] = []
    for part, title in RUNNER_PARTS.items():
        if part not in by_part:
            continue
        parts += [f"### {title}", ""]
        for name in by_part[part]:
            method = vars(Runner)[name].__wrapped__
            parts += [
                f"::: {method.__module__}.{method.__qualname__}",
                "    options:",
                f'      heading: "Runner.{name}"',
                f'      toc_label: "Runner.{name}"',
                "      heading_level: 4",
                "      show_root_full_path: false",
                "",
            ]
    return "\n".join(parts)


GENERATORS: dict[str, Callable[[], str]] = {
    "runner-methods": runner_methods,
    "cli": cli_reference,
    "events": event_reference,
    "http-routes": http_routes,
    "http-unserved": http_unserved,
}


def render(markdown: str) -> str:
    """``markdown`` with each marker replaced by its generated part."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise GenerationError(f"unknown generated part {name!r}; known: {sorted(GENERATORS)}")
        return GENERATORS[name]()

    return MARKER.sub(one, markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return render(markdown)


#: a Sphinx role left in a docstring, as Markdown renders it: :class:<code>~a.b.C</code>
SPHINX_ROLE = re.compile(r":(?:class|meth|func|attr|exc|mod|data|obj):<code>(~?)([\w.]+)</code>")


def on_page_content(html: str, **_: Any) -> str:
    """The docstrings' Sphinx roles as plain code (``~a.b.C`` shows as ``C``, as Sphinx
    would), so the API reference does not show ``:class:`` before a name."""
    return SPHINX_ROLE.sub(
        lambda m: f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}</code>",
        html,
    )
