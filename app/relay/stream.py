"""Relaying one engine stream to one client, token by token.

This is the hot path: every token crosses ``StreamRelay.events``. Per upstream
read it does one regex scan for event ends, a substring test for the usage
chunk, a flag test for shutdown and one histogram observation. JSON is parsed
only until the first token and for the final usage chunk.
"""

import time
from collections.abc import AsyncIterator, Callable

import httpx
from sse_starlette import EventSourceResponse
from starlette.types import Message, Receive, Scope, Send

from app.drain import Drain
from app.errors import (
    GatewayError,
    StoppedByShutdown,
    UpstreamFailed,
    UpstreamTimeout,
    sse_error_event,
)
from app.metrics import GatewayMetrics
from app.record import RequestRecord
from app.relay.events import EventSplitter, event_json, has_content, split_events
from app.relay.upstream import close_quietly
from app.settings import Settings

_USAGE = b'"usage":{'
_ERROR = b'data: {"error"'
_DONE = b"data: [DONE]"


class StreamRelay:
    def __init__(
        self,
        upstream: httpx.Response,
        record: RequestRecord,
        metrics: GatewayMetrics,
        drain: Drain,
        *,
        forward_usage: bool,
        on_close: Callable[[RequestRecord], None],
    ) -> None:
        self._upstream = upstream
        self._record = record
        self._metrics = metrics
        self._drain = drain
        self._forward_usage = forward_usage
        self._on_close = on_close
        self._closed = False
        self._chunks_after_first = 0
        self._saw_done = False
        self._engine_error = False

    async def events(self) -> AsyncIterator[bytes]:
        record = self._record
        splitter = EventSplitter()
        inter_token = self._metrics.inter_token
        last_sent = 0.0
        try:
            try:
                async for raw in self._upstream.aiter_raw():
                    data = splitter.feed(raw)
                    if not data:
                        continue
                    if record.first_token_at is None:
                        self._look_for_first_token(data)
                    if _USAGE in data:
                        data = self._take_usage(data)
                    if _DONE in data:
                        self._saw_done = True
                    if _ERROR in data:
                        self._engine_error = True
                    if self._drain.stopping:
                        raise StoppedByShutdown("the gateway is shutting down; retry the request")
                    if not data:
                        continue
                    if record.first_token_at is not None:
                        now = time.perf_counter()
                        if last_sent:
                            inter_token.observe(now - last_sent)
                            self._chunks_after_first += 1
                        last_sent = now
                    yield data
            except httpx.TimeoutException as exc:
                raise UpstreamTimeout("the engine stopped sending tokens (idle timeout)") from exc
            except httpx.HTTPError as exc:
                raise UpstreamFailed(f"the engine connection broke mid-stream: {exc!r}") from exc
            if not self._saw_done:
                raise UpstreamFailed("the engine ended the stream before [DONE]")
            if self._engine_error:
                record.finish("failed", status=200, error="the engine sent an error event")
            else:
                record.finish("completed", status=200)
        except GatewayError as error:
            record.fail(error)
            yield sse_error_event(error)
        finally:
            await self.close()

    def _look_for_first_token(self, data: bytes) -> None:
        for event in split_events(data):
            if has_content(event_json(event)):
                record = self._record
                record.first_token_at = time.perf_counter()
                record.phase = "streaming"
                self._metrics.ttft.observe(record.first_token_at - record.arrival)
                return

    def _take_usage(self, data: bytes) -> bytes:
        kept = []
        for event in split_events(data):
            if _USAGE in event:
                chunk = event_json(event)
                usage = chunk.get("usage") if isinstance(chunk, dict) else None
                if isinstance(usage, dict):
                    self._record.prompt_tokens = usage.get("prompt_tokens")
                    self._record.completion_tokens = usage.get("completion_tokens")
                if not self._forward_usage:
                    continue
            kept.append(event)
        return b"".join(kept)

    def client_disconnected(self) -> None:
        self._record.client_gone = True

    async def close(self) -> None:
        """Close the engine response (so the engine aborts), release the
        request's capacity and end its record. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        try:
            await close_quietly(self._upstream)
        finally:
            record = self._record
            if record.completion_tokens is None and record.first_token_at is not None:
                record.completion_tokens = self._chunks_after_first + 1
            if record.client_gone:
                record.cancel()
            else:
                record.finish("failed", status=200, error="stream torn down by the gateway")
            self._on_close(record)


class RelayResponse(EventSourceResponse):
    """sse-starlette's response (disconnect watch, pings, send timeout) around
    a relay, with one addition: the relay is closed however the response ends,
    even if the body was never started."""

    def __init__(self, relay: StreamRelay, settings: Settings) -> None:
        async def on_disconnect(_: Message) -> None:
            relay.client_disconnected()

        super().__init__(
            relay.events(),
            headers={"Cache-Control": "no-cache"},
            ping=settings.sse_ping_seconds,
            sep="\n",
            send_timeout=settings.sse_send_timeout,
            client_close_handler_callable=on_disconnect,
        )
        self._relay = relay

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._relay.close()
