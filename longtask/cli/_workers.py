"""Commands for threads served by workers: submit, worker, workers."""

from __future__ import annotations

import json
import logging
import time
from typing import Annotated

import typer
from rich.markup import escape

from longtask.cli._app import (
    DbOpt,
    JsonOpt,
    _runner,
    _stable_ref,
    _thread_option,
    app,
    checked_by,
    out,
)
from longtask.cli._hints import cmd
from longtask.cli._jsonarg import ContextOpt, parse_context, parse_json


@app.command()
def submit(
    task_ref: Annotated[
        str,
        typer.Argument(
            metavar="TASKREF",
            help="The task: package.module:name, or a file path every worker can read.",
        ),
    ],
    thread: Annotated[
        str | None, typer.Option("--thread", help="Thread id to use [default: a new one].")
    ] = None,
    input: Annotated[
        str | None, typer.Option("--input", help="Task inputs as JSON, or @file.json.")
    ] = None,
    context: ContextOpt = None,
    db: DbOpt = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            metavar="NAME",
            help="Who starts it: the thread's owner [default: you].",
            callback=checked_by,
        ),
    ] = None,
) -> None:
    """Queue a task on a new thread for the workers (PostgreSQL).

    Returns at once. Approve, reject, signal, resume, retry and cancel it as usual: they
    go to the queue."""
    from longtask.runtime import load_task
    from longtask.runtime._queue import require_postgres

    require_postgres(db)
    inputs = parse_json(input, "--input")
    run_context = parse_context(context)
    task = load_task(task_ref)
    thread_id = _thread_option(thread)
    with _runner(db, create=True) as runner:
        runner.submit(
            task,
            inputs,
            thread_id=thread_id,
            task_ref=_stable_ref(task_ref),
            by=by,
            context=run_context,
        )
    follow = cmd(f"longtask watch {thread_id}")
    out.print(f"thread {escape(thread_id)} queued; follow it with: {escape(follow)}")


@app.command()
def worker(
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Threads advanced at once.")
    ] = 1,
    queues: Annotated[
        list[str] | None, typer.Option("--queues", help="Queues to serve [default: longtask].")
    ] = None,
    stalled_after: Annotated[
        float,
        typer.Option(
            "--stalled-after",
            min=0.5,
            help="Seconds without a heartbeat after which a worker's threads are taken over.",
        ),
    ] = 30.0,
    name: Annotated[
        str | None, typer.Option("--name", help="Worker name [default: host:pid].")
    ] = None,
    prune_completed_before: Annotated[
        str | None,
        typer.Option(
            "--prune-completed-before",
            help="Also prune, on a schedule, completed threads older than this (like 30d).",
        ),
    ] = None,
    prune_failed_before: Annotated[
        str | None,
        typer.Option(
            "--prune-failed-before",
            help="Also prune, on a schedule, failed and cancelled threads older than this.",
        ),
    ] = None,
    prune_keep_last_checkpoint: Annotated[
        bool,
        typer.Option(
            "--prune-keep-last-checkpoint",
            help="Scheduled prunes keep each thread's final state and drop its history.",
        ),
    ] = False,
    prune_every: Annotated[
        str,
        typer.Option("--prune-every", help="How often this worker prunes (like 6h, 30m)."),
    ] = "6h",
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            metavar="PORT",
            min=0,
            max=65535,
            help="Serve Prometheus /metrics, /ok and /ready on this port (0: any free "
            "port, logged).",
        ),
    ] = None,
    metrics_host: Annotated[
        str,
        typer.Option(
            "--metrics-host",
            metavar="HOST",
            help="Interface of --metrics-port (it takes no token: keep it private).",
        ),
    ] = "127.0.0.1",
    db: DbOpt = None,
) -> None:
    """Run threads submitted to workers until stopped.

    Workers also fire due schedules (`longtask schedule`): one thread per tick, however
    many workers run. SIGTERM/SIGINT stop each running thread at its next step and hand it
    back to the queue. With --prune-completed-before / --prune-failed-before the worker
    also runs `longtask prune` every --prune-every (one worker at a time). With
    --metrics-port it serves Prometheus metrics and health checks (docs/howto/metrics.md).
    PostgreSQL only."""
    from longtask._runner import make_worker
    from longtask.cli._prune import _duration
    from longtask.ops._prune import PruneSchedule
    from longtask.runtime._queue import require_postgres

    schedule = None
    completed = _duration(prune_completed_before, "--prune-completed-before")
    failed = _duration(prune_failed_before, "--prune-failed-before")
    every = _duration(prune_every, "--prune-every")
    assert every is not None
    if every.total_seconds() < 1:
        raise typer.BadParameter("prune at most once a second", param_hint="--prune-every")
    if completed is not None or failed is not None:
        schedule = PruneSchedule(
            completed, failed, prune_keep_last_checkpoint, every.total_seconds()
        )
    elif prune_keep_last_checkpoint:
        raise typer.BadParameter(
            "give --prune-completed-before and/or --prune-failed-before too",
            param_hint="--prune-keep-last-checkpoint",
        )
    require_postgres(db)  # after the usage checks (exit 2), before anything opens the URL
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("psycopg").setLevel(logging.NOTSET)  # a worker's log keeps them
    make_worker(
        db,
        concurrency=concurrency,
        queues=queues,
        stalled_after=stalled_after,
        name=name,
        prune=schedule,
        metrics=(metrics_host, metrics_port) if metrics_port is not None else None,
    ).run()


@app.command()
def workers(
    within: Annotated[
        float,
        typer.Option("--within", min=1, help="Workers seen in the last N seconds."),
    ] = 120.0,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Live workers: heartbeat, threads held, jobs done, versions.

    A worker serves the definitions its code has loaded so far (it loads a task the first
    time one of its jobs needs it); it hands back the jobs of threads whose definition it
    lacks, for a worker that has it."""
    from longtask.runtime._routing import describe_serves

    with _runner(db) as runner:
        store = runner.db.store
        rows = store.workers(time.time() - within)
        # A worker's row says what it ran at its last beat: a killed worker's stays, after
        # another took the thread over. It holds a thread only while its lease is the one
        # in force.
        holding: dict[str, list[str]] = {}
        lost: dict[str, list[str]] = {}
        for w in rows:
            for thread in (w.current or "").split(","):
                if thread:
                    lease = store.lease_holder(thread)
                    mine = lease is not None and lease[0] == w.name
                    (holding if mine else lost).setdefault(w.name, []).append(thread)
    if json_:
        print(
            json.dumps(
                [
                    {
                        **w.to_json(),
                        "holding": holding.get(w.name, []),
                        "lost": lost.get(w.name, []),
                    }
                    for w in rows
                ],
                indent=2,
            )
        )
        return
    if not rows:
        out.print("no workers seen recently")
    now = time.time()
    for w in rows:
        silent = w.silent_for(now)
        if w.stopped_at:
            state = "stopped"
        elif silent is not None:
            state = f"[yellow]silent for {silent:.0f}s[/yellow] (no heartbeat)"
        else:
            state = f"beat {now - w.heartbeat_at.timestamp():.0f}s ago"
        held, gone = holding.get(w.name, []), lost.get(w.name, [])
        out.print(
            f"{escape(w.name)}  host={escape(w.host)} pid={w.pid} {state}"
            + (f"  running {escape(', '.join(held))}" if held else "  idle")
            + f"  jobs done={w.jobs}"
            + f"  serves {escape(describe_serves(w.serves) or '(no task loaded yet)')}"
            + (f"  handed back {w.handed_back}" if w.handed_back else "")
            + (f"  taken over: {escape(', '.join(gone))}" if gone else "")
        )


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port.")] = 8321,
    db: DbOpt = None,
    task: Annotated[
        list[str] | None,
        typer.Option(
            "--task",
            help="A task to offer to LangGraph clients (package.module:task or "
            "path/file.py:task); repeatable.",
        ),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            help='A JSON file of tasks: {"tasks": {"name": "module:task"}} '
            "[default: ./longtask.json if present].",
        ),
    ] = None,
    run_workers: Annotated[
        int, typer.Option("--run-workers", min=1, max=64, help="Threads that carry out runs.")
    ] = 4,
    workers: Annotated[
        bool,
        typer.Option(
            "--workers",
            help="Start the LangGraph API's threads on `longtask worker`s (PostgreSQL) "
            "instead of in this process.",
        ),
    ] = False,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--cors-origin",
            help="An origin whose browser pages may call the API (e.g. "
            "http://localhost:3000), * for any, none for no cross-origin page; repeatable "
            "[env: LONGTASK_CORS_ORIGINS, comma-separated; default: pages on localhost, "
            "127.0.0.1 and [::1], any port]. Tokens are still required.",
        ),
    ] = None,
    max_body: Annotated[
        str | None,
        typer.Option(
            "--max-body",
            help="The largest request body taken: bytes, or with KiB, MiB or GiB (4MiB); "
            "a larger one is answered 413 [env: LONGTASK_MAX_BODY; default: 1MiB].",
        ),
    ] = None,
    tokens_file: Annotated[
        str | None,
        typer.Option(
            "--tokens-file",
            help="A file of users, one a line: NAME [admin|viewer|user] sha256:HEX (the "
            "SHA-256 of their token; the file holds no token), added to "
            "$LONGTASK_API_TOKENS [env: LONGTASK_API_TOKENS_FILE].",
        ),
    ] = None,
) -> None:
    """The web page, its HTTP API and the LangGraph Server API.

    The page shows threads live (SSE); approve and reject from the browser. LangGraph
    clients (langgraph-sdk, Studio, Agent Chat UI) drive the tasks given with --task or in
    longtask.json; their runs are carried out in the background, and continue after a
    restart. Due schedules fire (`longtask schedule`), and the schedules those tasks
    declare are registered at start. GET /metrics (Prometheus), /ok and /ready serve
    monitoring (docs/howto/metrics.md). Tokens (Bearer or X-Api-Key):
    $LONGTASK_API_TOKEN (named by $LONGTASK_API_USER) or
    $LONGTASK_API_TOKENS=name=token[:admin|viewer],..., and/or --tokens-file; with any
    token every request needs one and each user sees their own threads; without one (open
    mode, 127.0.0.1 only) anyone local reads and nobody acts. An "auth" path in the
    --config file plugs in LangGraph's Auth handlers (docs/howto/users.md)."""
    from longtask.serve import run_server

    run_server(
        host=host,
        port=port,
        db=db,
        tasks=task,
        config=config,
        run_workers=run_workers,
        to_workers=workers,
        cors_origins=cors_origin or None,
        tokens_file=tokens_file,
        max_body=max_body,
        # said once every check passed: a refusal (no token off loopback) prints only itself
        on_ready=lambda: out.print(f"serving on http://{host}:{port}/ (Ctrl-C to stop)"),
    )
