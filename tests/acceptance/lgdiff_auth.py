"""An owner-only auth handler, as LangGraph's docs show it: a bearer token names the user,
every resource gets the user as its ``owner`` metadata, and only what a user owns is theirs.
Used by LangGraph's own server and by ``longtask serve`` (test_lg_auth_differential.py,
test_access_handlers.py).

The part between the two ``# --`` lines is printed in docs/howto/users.md as it is here
(tests/integration/test_docs.py checks that the page's block is this text), so the handler
users copy is the one both servers run. The rest is the tests' own: handlers for assistants
and crons, and a log of each call in ``$LGDIFF_AUTH_LOG`` (if set), so a test can see the
handlers ran."""

import functools
import json
import os
from typing import Any

# -- the handler of docs/howto/users.md --
from langgraph_sdk import Auth

auth = Auth()
USERS = {"tok-user1": "user1", "tok-user2": "user2"}


@auth.authenticate
async def authenticate(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or token not in USERS:
        raise Auth.exceptions.HTTPException(status_code=401, detail="Invalid token")
    return USERS[token]


@auth.on
async def owner_only(ctx: Auth.types.AuthContext, value: dict) -> dict:
    filters = {"owner": ctx.user.identity}
    value.setdefault("metadata", {}).update(filters)
    return filters


# -- end of the handler of docs/howto/users.md --


def _log(what: str, **data: object) -> None:
    path = os.environ.get("LGDIFF_AUTH_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"call": what, **data}, default=str) + "\n")


@functools.wraps(authenticate)  # the servers read the parameters it names through it
async def _logged_authenticate(*args: Any, **kwargs: Any) -> str:
    try:
        user = await authenticate(*args, **kwargs)
    except Exception:
        _log("authenticate", ok=False)
        raise
    _log("authenticate", ok=True, user=user)
    return user


@functools.wraps(owner_only)
async def _logged_owner_only(ctx: Auth.types.AuthContext, value: dict) -> dict:
    _log("on", resource=ctx.resource, action=ctx.action, user=ctx.user.identity, value=value)
    return await owner_only(ctx=ctx, value=value)


# The printed functions run unchanged; the log wraps them where both servers look them up
# (an Auth takes one authenticate and one global handler, so they are replaced in place).
auth._authenticate_handler = _logged_authenticate
auth._global_handlers[-1] = _logged_owner_only


@auth.on.assistants
async def own_assistants(ctx: Auth.types.AuthContext, value: dict) -> dict | None:
    """Every user may read, search and run every assistant (the deployment's graphs have no
    owner); a created one gets its creator as ``owner`` metadata, and only they change it."""
    _log("on", resource=ctx.resource, action=ctx.action, user=ctx.user.identity)
    if ctx.action == "create":
        value["metadata"]["owner"] = ctx.user.identity
    if ctx.action in ("update", "delete"):
        return {"owner": ctx.user.identity}
    return None


@auth.on.crons
async def own_crons(ctx: Auth.types.AuthContext, value: dict) -> dict:
    """A cron is its maker's: created with their ``owner`` metadata, seen only by them."""
    _log("on", resource=ctx.resource, action=ctx.action, user=ctx.user.identity)
    if ctx.action == "create":
        metadata = value.setdefault("metadata", {})
        if isinstance(metadata, dict):
            metadata["owner"] = ctx.user.identity
    return {"owner": ctx.user.identity}
