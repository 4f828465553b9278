"""An owner-only auth handler, as LangGraph's docs show it: a bearer token names the user,
every resource gets the user as its ``owner`` metadata, and only what a user owns is theirs.
Used by LangGraph's own server and by ``longtask serve`` (test_lg_differential.py,
test_access_handlers.py). Each call is appended to ``$LGDIFF_AUTH_LOG`` (if set), so a test
can see the handlers ran."""

import json
import os

from langgraph_sdk import Auth

USERS = {"tok-user1": "user1", "tok-user2": "user2"}

auth = Auth()


def _log(what: str, **data: object) -> None:
    path = os.environ.get("LGDIFF_AUTH_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"call": what, **data}, default=str) + "\n")


@auth.authenticate
async def authenticate(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or token not in USERS:
        _log("authenticate", ok=False)
        raise Auth.exceptions.HTTPException(status_code=401, detail="Invalid token")
    _log("authenticate", ok=True, user=USERS[token])
    return USERS[token]


@auth.on
async def owner_only(ctx: Auth.types.AuthContext, value: dict) -> dict:
    _log("on", resource=ctx.resource, action=ctx.action, user=ctx.user.identity)
    filters = {"owner": ctx.user.identity}
    metadata = value.setdefault("metadata", {})
    if isinstance(metadata, dict):
        metadata.update(filters)
    return filters


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
