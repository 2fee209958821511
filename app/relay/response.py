"""Streaming one relayed engine stream to its client, as a pure ASGI response.

One task group per stream, not a cancel scope per chunk: the pump reads from
the engine and sends each read's whole events in one ``send``; beside it one
task waits for the client's ``http.disconnect`` and one keeps time — a
keep-alive comment after ``ping`` seconds without a send, and the send
timeout: a send the client has not taken within ``send_timeout`` (checked
at least every half timeout) drops the client. Whatever ends the stream
first — the engine, the client, a slow reader, the drain's deadline —
cancels the group; the stream then ends the way that cause calls for, its
engine response is closed (so the engine aborts what it still generates) and
its capacity is given back, exactly once.
"""

import logging
import time
from collections.abc import Awaitable, Callable

import anyio
import httpx
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.drain import Drain
from app.errors import (
    GatewayError,
    SlowReader,
    StoppedByShutdown,
    UpstreamFailed,
    UpstreamTimeout,
    sse_error_event,
)
from app.logs import left_unfinished
from app.record import RequestRecord
from app.relay.stream import StreamRelay
from app.relay.upstream import close_quietly

log = logging.getLogger("gateway.relay")

_HEADERS = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
}
_PING = b": ping\n\n"
# How long the final error event of a stopped stream may take to go out.
_FAREWELL_SECONDS = 2.0


# Called when the engine fails a stream before its first event: returns the
# response of another engine to relay instead, or None.
Reopen = Callable[[GatewayError], Awaitable[httpx.Response | None]]


class _ClientGone(Exception):
    """The client's disconnect ended the stream."""


class RelayResponse(Response):
    """A Starlette ``Response`` by type only (the routes return it like any
    other); everything it sends is its own."""

    def __init__(
        self,
        upstream: httpx.Response,
        relay: StreamRelay,
        record: RequestRecord,
        drain: Drain,
        *,
        ping_seconds: float,
        send_timeout: float,
        on_close: Callable[[], None],
        reopen: Reopen | None = None,
    ) -> None:
        self.status_code = 200
        self.background = None
        self.init_headers(_HEADERS)
        self._upstream = upstream
        self._relay = relay
        self._record = record
        self._drain = drain
        self._ping = ping_seconds
        self._send_timeout = send_timeout
        self._on_close = on_close
        self._reopen = reopen
        self._sent_events = False
        self._ended_by: Exception | None = None
        self._cancel: anyio.CancelScope | None = None
        self._sending_since: float | None = None
        self._last_send = 0.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            self._last_send = time.perf_counter()
            async with anyio.create_task_group() as group:
                self._cancel = group.cancel_scope
                group.start_soon(self._watch_client, receive)
                group.start_soon(self._keep_time, send)
                unregister = self._drain.on_stop(self._stop_for_drain)
                try:
                    await self._pump(send)
                finally:
                    unregister()
                    group.cancel_scope.cancel()
            await self._end(send)
        finally:
            await close_quietly(self._upstream)
            self._relay.count_partial_output()
            # Nothing above may leave the request without an outcome.
            self._record.finish("failed", status=200, error="stream torn down by the gateway")
            self._on_close()

    # --- the pump ----------------------------------------------------------

    async def _pump(self, send: Send) -> None:
        error = await self._relay_from_engine(send)
        while error is not None and not self._sent_events and self._reopen is not None:
            # Nothing of the answer went out yet: another engine may serve it.
            await close_quietly(self._upstream)
            reopened = await self._reopen(error)
            if reopened is None:
                break
            self._upstream = reopened
            self._relay.restart()
            error = await self._relay_from_engine(send)
        body = b""
        if error is not None:
            self._relay.count_partial_output()
            self._record.fail(error)
            body = sse_error_event(error)
        self._sending_since = time.perf_counter()
        await send({"type": "http.response.body", "body": body, "more_body": False})
        self._sending_since = None

    async def _relay_from_engine(self, send: Send) -> GatewayError | None:
        """Forward the engine's stream; the error that ended it early, if any."""
        relay = self._relay
        try:
            async for raw in self._upstream.aiter_raw():
                now = time.perf_counter()
                data = relay.feed(raw, now)
                if data:
                    self._sending_since = now
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                    self._sending_since = None
                    self._last_send = now
                    self._sent_events = True
            relay.finish()
        except httpx.TimeoutException:
            return UpstreamTimeout("the engine stopped sending tokens (idle timeout)")
        except httpx.HTTPError as exc:
            return UpstreamFailed(f"the engine connection broke mid-stream: {exc!r}")
        except UpstreamFailed as exc:
            return exc
        return None

    # --- what else can end the stream -----------------------------------------

    def _end_because(self, cause: Exception) -> None:
        if self._ended_by is None and self._cancel is not None:
            self._ended_by = cause
            self._cancel.cancel()

    def _stop_for_drain(self) -> None:
        self._end_because(StoppedByShutdown("the gateway is shutting down; retry the request"))

    async def _watch_client(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._record.client_gone = True
        self._end_because(_ClientGone())

    async def _keep_time(self, send: Send) -> None:
        limit = self._send_timeout
        while True:
            now = time.perf_counter()
            since = self._sending_since
            if since is not None:
                if now - since >= limit:
                    self._end_because(SlowReader(f"the client took no data for {limit:g}s"))
                    return
                wake = since + limit
            elif self._ping and now - self._last_send >= self._ping:
                await self._send_ping(send)
                continue
            else:
                wake = self._last_send + self._ping if self._ping else now + limit
            await anyio.sleep(max(0.001, min(wake, now + limit / 2) - now))

    async def _send_ping(self, send: Send) -> None:
        self._sending_since = started = time.perf_counter()
        with anyio.move_on_after(self._send_timeout) as scope:
            await send({"type": "http.response.body", "body": _PING, "more_body": True})
        if scope.cancelled_caught:
            self._end_because(SlowReader(f"the client took no data for {self._send_timeout:g}s"))
            return
        self._sending_since = None
        self._last_send = started

    async def _end(self, send: Send) -> None:
        cause, record = self._ended_by, self._record
        if cause is None:
            return
        self._relay.count_partial_output()
        if isinstance(cause, _ClientGone):
            record.cancel()
        elif isinstance(cause, SlowReader):
            # The response stays unfinished: its connection is closed by the
            # server, which this request's one log line already explains.
            left_unfinished.set(True)
            log.warning("dropped a client that stopped reading: %s", cause.message)
            record.fail(cause)
        elif isinstance(cause, GatewayError):
            record.fail(cause)
            farewell = sse_error_event(cause)
            with anyio.move_on_after(_FAREWELL_SECONDS, shield=True):
                await send({"type": "http.response.body", "body": farewell, "more_body": False})
