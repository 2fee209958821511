"""Sending one relayed stream to its client: headers, events, pings, the send timeout.

The pump reads the engine's stream and sends each read's whole events in one
``send`` (``StreamRelay.feed`` says what they are). Beside it, ``keep_time``
runs in the request's task group: a keep-alive comment after ``ping``
seconds without a send, and the send timeout — a send the client has not
taken within ``send_timeout`` (checked at least every half timeout) drops
the client, through the ``drop`` callback its owner gives it. Ending the
stream, and everything it held, is the owner's (``app.request.flight``).
"""

import time
from collections.abc import AsyncIterator, Callable

import anyio
from prometheus_client import Histogram
from starlette.types import Send

from app.relay.stream import StreamRelay
from app.request.errors import SlowReader

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_PING = b": ping\n\n"


class StreamSender:
    def __init__(
        self,
        send: Send,
        *,
        ping_seconds: float,
        send_timeout: float,
        first_event_added: Histogram | None = None,
    ) -> None:
        self._send = send
        self._first_event_added = first_event_added
        self._ping = ping_seconds
        self._send_timeout = send_timeout
        # When the send under way began (None: none is), and when the last ended.
        self._sending_since: float | None = None
        self._last_send = 0.0
        # Bytes of the answer itself (not pings) reached the client.
        self.sent_events = False

    async def start(self, headers: dict[str, str]) -> None:
        raw = _HEADERS + [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        await self._send({"type": "http.response.start", "status": 200, "headers": raw})
        self._last_send = time.perf_counter()

    async def pump(self, chunks: AsyncIterator[bytes], relay: StreamRelay) -> None:
        """Forward the engine's chunks until its stream ends (this is the
        hot path: one ``feed`` and at most one ``send`` per read)."""
        send = self._send
        async for raw in chunks:
            now = time.perf_counter()
            data = relay.feed(raw, now)
            if data:
                self._sending_since = now
                await send({"type": "http.response.body", "body": data, "more_body": True})
                self._sending_since = None
                self._last_send = now
                if not self.sent_events:
                    self.sent_events = True
                    if self._first_event_added is not None:
                        self._first_event_added.observe(time.perf_counter() - now)

    async def end(self, body: bytes = b"", *, within: float | None = None) -> None:
        """The stream's last message; ``within``: given up after that many
        seconds, even while the caller is being cancelled (a farewell)."""
        message = {"type": "http.response.body", "body": body, "more_body": False}
        if within is not None:
            with anyio.move_on_after(within, shield=True):
                await self._send(message)
            return
        self._sending_since = time.perf_counter()
        await self._send(message)
        self._sending_since = None

    async def keep_time(self, drop: Callable[[SlowReader], None]) -> None:
        limit = self._send_timeout
        while True:
            now = time.perf_counter()
            since = self._sending_since
            if since is not None:
                if now - since >= limit:
                    drop(SlowReader(f"the client took no data for {limit:g}s"))
                    return
                wake = since + limit
            elif self._ping and now - self._last_send >= self._ping:
                if not await self._send_ping():
                    drop(SlowReader(f"the client took no data for {limit:g}s"))
                    return
                continue
            else:
                wake = self._last_send + self._ping if self._ping else now + limit
            await anyio.sleep(max(0.001, min(wake, now + limit / 2) - now))

    async def comment(self, text: str) -> bool:
        """Send an SSE comment line (which SSE parsers ignore); False if the
        client did not take it in time."""
        return await self._send_ping(b": " + text.encode() + b"\n\n")

    async def _send_ping(self, body: bytes = _PING) -> bool:
        """Send a keep-alive comment; False if the client did not take it in time."""
        self._sending_since = started = time.perf_counter()
        with anyio.move_on_after(self._send_timeout) as scope:
            await self._send({"type": "http.response.body", "body": body, "more_body": True})
        if scope.cancelled_caught:
            return False
        self._sending_since = None
        self._last_send = started
        return True
