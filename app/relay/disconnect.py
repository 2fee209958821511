"""Racing work against the client's disconnect (and the end of a drain).

Before a response has started, nothing in Starlette watches the connection:
a handler awaiting the engine keeps awaiting after the client has gone. Here
the work runs beside a task that waits for ``http.disconnect``; whichever
ends first cancels the other, and cancelling the work closes its engine
connection, which makes the engine abort the request. The work runs in the
calling task, inside the task group's cancel scope: cancelling a separate
task running an httpx call was seen to leave the engine connection open.
"""

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from starlette.types import Receive

from app.errors import ClientDisconnected

T = TypeVar("T")


class Stopped(Exception):
    """``stop`` ended first (the drain's grace period ran out)."""


async def until_disconnected(
    receive: Receive,
    work: Callable[[], Awaitable[T]],
    discard: Callable[[T], Awaitable[None]] | None = None,
    stop: Callable[[], Awaitable[None]] | None = None,
) -> T:
    """Return ``work()``'s result, or raise ``ClientDisconnected`` if the
    client left first, or ``Stopped`` if ``stop()`` returned first. A result
    that arrives together with either is handed to ``discard`` (e.g. to close
    an engine response)."""
    gone = stopped = False
    results: list[T] = []
    failure: Exception | None = None

    async with anyio.create_task_group() as group:

        async def watch() -> None:
            nonlocal gone
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    gone = True
                    group.cancel_scope.cancel()
                    return

        async def wait_stop() -> None:
            nonlocal stopped
            assert stop is not None
            await stop()
            stopped = True
            group.cancel_scope.cancel()

        group.start_soon(watch)
        if stop is not None:
            group.start_soon(wait_stop)
        try:
            results.append(await work())
        except Exception as exc:
            # Raised after the task group, so it is not wrapped in an
            # exception group; cancellation (BaseException) still reaches
            # the group's scope.
            failure = exc
        finally:
            group.cancel_scope.cancel()

    if gone or stopped:
        if results and discard is not None:
            await discard(results[0])
        raise ClientDisconnected if gone else Stopped
    if failure is not None:
        raise failure
    return results[0]
