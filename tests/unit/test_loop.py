"""The one event loop async step code runs on (``steps._loop``): the same loop for every call
(a client made on it by one call still works in the next, which a loop per call broke with
"Event loop is closed"), the caller's context variables, exceptions and timeouts through,
and a call from code already on that loop run elsewhere rather than waiting on itself."""

from __future__ import annotations

import asyncio
import contextvars
import time

import pytest

from longtask.errors import StepTimeout
from longtask.steps._function import call_step
from longtask.steps._loop import run_coroutine

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


async def _loop_id() -> int:
    await asyncio.sleep(0)
    return id(asyncio.get_running_loop())


def test_every_call_runs_on_the_same_loop_and_a_kept_client_keeps_working() -> None:
    assert run_coroutine(_loop_id) == run_coroutine(_loop_id)
    # what an async HTTP client does: made on the loop of one call, used by the next
    queue: list[asyncio.Queue[str]] = []

    async def make() -> None:
        queue.append(asyncio.Queue())
        await queue[0].put("kept")

    async def use() -> str:
        return await asyncio.wait_for(queue[0].get(), 5)

    run_coroutine(make)
    assert run_coroutine(use) == "kept"


def test_the_callers_context_exceptions_and_timeouts_go_through() -> None:
    async def who() -> str:
        return WHO.get()

    token = WHO.set("ada")
    try:
        assert run_coroutine(who) == "ada"
    finally:
        WHO.reset(token)

    async def fails() -> None:
        raise ValueError("no such page")

    with pytest.raises(ValueError, match="no such page"):
        run_coroutine(fails)

    cancelled: list[bool] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        run_coroutine(slow, timeout=0.2)
    assert time.monotonic() - started < 10
    deadline = time.monotonic() + 5
    while not cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cancelled == [True], "the timed-out coroutine was cancelled on the loop"


def test_a_call_from_code_on_the_loop_runs_elsewhere_instead_of_waiting_on_itself() -> None:
    async def inner() -> str:
        return "inner done"

    async def outer() -> str:
        # a sync function a coroutine calls, which itself runs async code
        return run_coroutine(inner, timeout=5)

    assert run_coroutine(outer, timeout=10) == "inner done"


def test_an_async_step_function_runs_on_the_shared_loop_and_times_out_as_a_step() -> None:
    async def step() -> int:
        return id(asyncio.get_running_loop())

    assert call_step(step, (), None, "step 'a'") == run_coroutine(_loop_id)

    async def slow() -> None:
        await asyncio.sleep(30)

    with pytest.raises(StepTimeout, match=r"step 'b' did not finish within 0\.2 s"):
        call_step(slow, (), 0.2, "step 'b'")
