"""Queue status for a waiting stream, for the clients that ask for it.

A streaming request sent with ``X-Queue-Status: on`` that has to wait in
the admission queue gets its response head at once, then an SSE comment
every ``GATEWAY_QUEUE_STATUS_INTERVAL`` seconds while it waits::

    : queued position=3 eta_s=2.1

``position`` is its place in the queue's fair order (1: next), ``eta_s``
when it should be admitted, from the queue's measured drain rate
(``app.admission.forecast``; left out while nothing measures it). SSE
parsers, the OpenAI SDK's among them, skip comment lines. Then the stream
follows as usual. Refused after that (its deadline passed in the queue, the
gateway draining), it cannot be a 429 any more: it ends with the SSE error
event, whose error object carries the wait ``Retry-After`` would have said
(``retry_after``, seconds). A request admitted at once, or refused before
it is queued, is answered as without the header; without the header
nothing changes.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
from anyio.abc import TaskGroup
from starlette.datastructures import Headers

from app.admission.forecast import QueuePlace
from app.relay.sse import StreamSender
from app.request.errors import SlowReader

HEADER = "x-queue-status"


def asked(headers: Headers) -> bool:
    return headers.get(HEADER, "").strip().lower() == "on"


def comment(place: QueuePlace) -> str:
    text = f"queued position={place.position}"
    if place.eta_s is not None:
        text += f" eta_s={place.eta_s:.1f}"
    return text


async def report(
    place_of: Callable[[], QueuePlace | None],
    open_stream: Callable[[], Awaitable[StreamSender]],
    interval: float,
    drop: Callable[[SlowReader], None],
) -> None:
    """While the request is queued: open its stream, and say where it
    stands every ``interval`` seconds (``drop``: a client that takes none)."""
    while (place := place_of()) is not None:
        sender = await open_stream()
        if not await sender.comment(comment(place)):
            drop(SlowReader("the client took no data while queued"))
            return
        await anyio.sleep(interval)


@asynccontextmanager
async def reporting(
    group: TaskGroup,
    place_of: Callable[[], QueuePlace | None],
    open_stream: Callable[[], Awaitable[StreamSender]],
    interval: float,
    drop: Callable[[SlowReader], None],
) -> AsyncIterator[None]:
    """``report`` in ``group`` while the block runs (the request's admission)."""
    told = anyio.CancelScope()

    async def tell() -> None:
        with told:
            await report(place_of, open_stream, interval, drop)

    group.start_soon(tell)
    try:
        yield
    finally:
        told.cancel()
