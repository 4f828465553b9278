"""A FastAPI app as LangGraph's templates mount one (langgraph.json's ``http.app``), served
beside the API by ``test_http_app.py``: routes with a rule of their own, one with none, one
on a path of the API, a lifespan and an exception handler of the app's own."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from longtask.serve.access import public, signed_in


class Teapot(Exception):
    pass


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.lifespan = ["started"]
    yield
    app.state.lifespan.append("stopped")


app = FastAPI(lifespan=lifespan)


@app.exception_handler(Teapot)
async def teapot(request: Request, exc: Teapot) -> JSONResponse:
    return JSONResponse({"brewed": False}, status_code=418)


@app.get("/hello")
@signed_in
async def hello(request: Request) -> dict[str, Any]:
    user = request.scope.get("user")
    return {"hello": "world", "user": getattr(user, "identity", None)}


@app.get("/ping")
@public
async def ping() -> dict[str, str]:
    return {"pong": "yes"}


@app.post("/items/{item_id}")
@signed_in
async def item(item_id: int, request: Request) -> dict[str, Any]:
    if item_id == 404:
        raise HTTPException(404, "no such item")
    if item_id == 418:
        raise Teapot()
    return {"item_id": item_id, "body": await request.json()}


@app.get("/unruled")
async def unruled(request: Request) -> dict[str, Any]:
    user = request.scope.get("user")
    return {"unruled": True, "user": getattr(user, "identity", None)}


@app.get("/info")
@public
async def info() -> dict[str, str]:
    return {"served_by": "the app"}


@app.get("/ok")
@public
async def ok() -> dict[str, str]:
    return {"served_by": "the app"}
