"""``run_server``: open a Runner and serve the app with uvicorn."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from longtask.errors import InvalidInput
from longtask.serve._hosts import is_loopback
from longtask.serve.access._tokens import (
    ENV_TOKEN,
    ENV_TOKENS,
    check_roles,
    check_tokens,
    roles_from_env,
    tokens_from_env,
)


def run_server(
    host: str = "127.0.0.1",
    port: int = 8000,
    db: str | None = None,
    tokens: Mapping[str, str] | None = None,
    roles: Mapping[str, str] | None = None,
    tokens_file: str | None = None,
    tasks: list[str] | None = None,
    config: str | None = None,
    run_workers: int = 4,
    to_workers: bool = False,
    cors_origins: Sequence[str] | None = None,
    on_ready: Callable[[], None] | None = None,
    max_body: str | None = None,
) -> None:
    """Serve the API and the pages on ``host:port`` until interrupted.

    ``tokens`` (``{token: name}``) and ``roles`` (``{name: role}``) default to
    ``$LONGTASK_API_TOKENS`` and ``$LONGTASK_API_TOKEN`` (``NAME=TOKEN[:ROLE]``). Off
    loopback a token is required. With any token every request but the health checks and
    the page's shell needs one, on loopback too; ``tokens_file`` (default
    ``$LONGTASK_API_TOKENS_FILE``) adds the users of a file of names, roles and tokens'
    SHA-256 (``longtask.serve.access``); with none (open mode, loopback only)
    anyone on this machine reads everything and nobody acts.
    ``tasks`` (references) and ``config`` (a ``longtask.json``; by default the one in the
    working directory, if any) register the tasks the LangGraph Server API offers; with
    ``to_workers`` (PostgreSQL) its runs start threads served by ``longtask worker``.
    ``cors_origins`` (default ``$LONGTASK_CORS_ORIGINS``, else pages on loopback origins):
    the origins whose browser pages may call the API (``longtask.serve._cors``).
    ``max_body`` (default ``$LONGTASK_MAX_BODY``, else 1 MiB): the largest request body
    taken (bytes, or with KiB, MiB or GiB); a larger one is answered 413.
    ``on_ready`` is called once everything is checked, just before serving (the CLI says
    "serving on ..." there, never before a refusal).
    Connections are bounded (``longtask.serve._limits``): a request's head must arrive
    within 10 s and take at most 32 KiB, and an idle keep-alive is closed after 5 s.
    """
    configured = check_tokens(tokens) if tokens is not None else tokens_from_env(os.environ)
    given_roles = check_roles(roles) if roles is not None else roles_from_env(os.environ)
    from longtask.serve.access import ENV_TOKENS_FILE, combine, read_tokens_file

    tokens_file = tokens_file or os.environ.get(ENV_TOKENS_FILE, "").strip() or None
    hashes: dict[str, str] = {}
    if tokens_file is not None:
        hashes, file_roles = read_tokens_file(tokens_file)
        given_roles = combine(configured, given_roles, hashes, file_roles, tokens_file)
    from longtask.serve._cors import check_origins, cors_origins_from_env

    if cors_origins is None:
        cors_origins = cors_origins_from_env(os.environ)
    if cors_origins is not None:
        cors_origins = check_origins(cors_origins)
    from longtask.serve._json_body import ENV_MAX_BODY, MAX_BODY, parse_size
    from longtask.serve._registry import auth_path
    from longtask.serve.access import load_auth

    given_size = max_body or os.environ.get(ENV_MAX_BODY, "").strip() or None
    body_limit = (
        parse_size(given_size, "--max-body" if max_body else f"${ENV_MAX_BODY}")
        if given_size
        else MAX_BODY
    )
    handler_path = auth_path(config)
    auth_handler = load_auth(*handler_path) if handler_path is not None else None
    loopback = is_loopback(host)
    if not loopback and not configured and not hashes and auth_handler is None:
        raise InvalidInput(
            f"refusing to serve on {host!r} without an API token: anyone who can reach it "
            f"could read every thread. Set {ENV_TOKEN} (or {ENV_TOKENS}=name=token,..., or "
            f"{ENV_TOKENS_FILE}=users.txt), or "
            "serve on 127.0.0.1"
        )
    import uvicorn

    from longtask._runner import Runner
    from longtask.serve._app import create_app
    from longtask.serve._limits import (
        KEEP_ALIVE_TIMEOUT,
        MAX_HEAD_BYTES,
        BoundedH11Protocol,
        bounded_heads,
    )
    from longtask.serve._registry import load_registry
    from longtask.serve._userapp import load_http

    registry = load_registry(tasks or [], config)
    http = load_http(config)
    with Runner(db) as runner:
        if to_workers:
            from longtask.runtime._queue import make_app

            make_app(runner.db)  # PostgreSQL only: refuse now, not at the first run
        app = create_app(
            runner,
            configured,
            roles=given_roles,
            token_hashes=hashes,
            auth_handler=auth_handler,
            loopback_hosts_only=loopback,
            registry=registry,
            run_workers=run_workers,
            to_workers=to_workers,
            cors_origins=cors_origins,
            max_body=body_limit,
            http=http,
        )
        for where in app.state.uncovered:
            print(f"longtask serve: route {where} has no authorization rule: refused")
        for where in app.state.app_refused:
            print(
                f"longtask serve: the app's route {where} declares no authorization rule, so "
                "every request to it is refused: declare one on its endpoint "
                "(longtask.serve.access.public, signed_in, reader...) or set "
                '"enable_custom_route_auth": true under "http" to let any signed-in caller in'
            )
        for where in app.state.app_shadowed:
            print(f"longtask serve: the app's route {where} is not served: the API keeps that path")
        for note in http.notes if http is not None else []:
            print(f"longtask serve: {note}")
        if auth_handler is not None:
            named = handler_path[0] if handler_path else ""
            print(f"auth handler {named}: it identifies every caller and decides what they see")
        elif not configured and not hashes:
            print(
                "open mode: no API token is set, so anyone on this machine can read every "
                f"thread and nobody can act; set {ENV_TOKENS}=name=token[:role],... to "
                "require a token for every request"
            )
        if on_ready is not None:
            on_ready()
        # No access log: a URL may carry an access_token (EventSource cannot send headers).
        uvicorn.run(
            bounded_heads(app),
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            http=BoundedH11Protocol,
            timeout_keep_alive=KEEP_ALIVE_TIMEOUT,
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        )
