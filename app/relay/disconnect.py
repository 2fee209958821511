"""Racing work against the client's disconnect.

Before a response has started, nothing in Starlette watches the connection:
a handler awaiting the engine keeps awaiting after the client has gone. Here
the work runs beside a task that waits for ``http.disconnect``; whichever
ends first cancels the other, and cancelling the work closes its engine
connection, which makes the engine abort the request.
"""

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from starlette.types import Receive

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client went away before the gateway answered."""


async def until_disconnected(
    receive: Receive,
    work: Callable[[], Awaitable[T]],
    discard: Callable[[T], Awaitable[None]] | None = None,
) -> T:
    """Return ``work()``'s result, or raise ``ClientDisconnected`` if the
    client left first. A result that arrives together with the disconnect is
    handed to ``discard`` (e.g. to close an engine response)."""
    gone = False
    results: list[T] = []
    failure: Exception | None = None

    async with anyio.create_task_group() as group:

        async def watch() -> None:
            nonlocal gone
            while True:
                print("WATCH start", flush=True)
                message = await receive()
                print("WATCH GOT", message["type"], flush=True)
                if message["type"] == "http.disconnect":
                    gone = True
                    group.cancel_scope.cancel()
                    return

        group.start_soon(watch)
        try:
            results.append(await work())
        except Exception as exc:
            # Raised after the task group, so it is not wrapped in an
            # exception group; cancellation (BaseException) still reaches
            # the group's scope.
            failure = exc
        finally:
            group.cancel_scope.cancel()

    print("UNTIL done gone=", gone, "results", bool(results), flush=True)
    if gone:
        if results and discard is not None:
            await discard(results[0])
        raise ClientDisconnected
    if failure is not None:
        raise failure
    return results[0]
