"""Waiting for a state instead of sleeping for one.

A test that needs "the request is queued by now" polls what says so (a
gauge, the engine's counters) until it holds, with a deadline generous
enough that a busy machine does not tip it. The poll interval is the only
sleep.
"""

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

Check = Callable[[], bool | Awaitable[bool]]


async def wait_for(check: Check, timeout: float, interval: float = 0.05) -> bool:
    """Poll ``check`` until it holds or ``timeout`` seconds pass; whether it
    held. A plain function runs in a thread (it may block, e.g. scrape a
    ``/metrics``), so the event loop keeps serving the test's other
    requests meanwhile; a coroutine function is awaited on the loop."""
    deadline = time.monotonic() + timeout
    while True:
        if await _holds(check):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(interval)


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """``wait_for`` for code without an event loop."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


async def _holds(check: Check) -> bool:
    if inspect.iscoroutinefunction(check):
        return bool(await check())
    return bool(await asyncio.to_thread(check))
