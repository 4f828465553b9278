"""An auth handler file as LangGraph's docs write one for the store: a bearer token
``tok-NAME`` is the user NAME, and each user keeps to the namespaces under their name."""

from __future__ import annotations

from typing import Any

from langgraph_sdk import Auth

auth = Auth()


@auth.authenticate
async def authenticate(authorization: str | None) -> str:
    if not authorization or not authorization.startswith("Bearer tok-"):
        raise Auth.exceptions.HTTPException(status_code=401, detail="Invalid token")
    return authorization.removeprefix("Bearer tok-")


@auth.on.store()
async def own_namespace(ctx: Auth.types.AuthContext, value: Any) -> None:
    namespace = tuple(value["namespace"] or ())
    assert namespace[:1] == (ctx.user.identity,), "Not authorized"
