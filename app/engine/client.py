"""The HTTP client for the engines.

One ``aiohttp.ClientSession`` per app, for every engine (its connector keeps
connections per engine), with the pool limit and timeouts from the settings.
aiohttp parses the engine's answers in C, and a read hands over whatever
bytes arrived: on a relayed stream that is one read per engine write, with
no per-chunk cancel scope or pure-Python parsing in between.

Every call names the engine's base URL. The one translation of the HTTP
library's errors into the gateway's own (``_gateway_error``) is here, for
the request, the response headers and every read of the body alike, for
the requests' calls and the monitor's small GETs: nothing above this module
sees an aiohttp exception.

An engine's 503 or 429 ("try again") always leaves here with a Retry-After:
the engine's own if it sent one, else the gateway's ``retry_after_unavailable``.
vLLM sends none: its queue caps (``--max-num-queued-reqs``,
``--max-num-queued-tokens``) answer a bare 503.

With ``upstream_api_key`` set, every call carries it as the engine's
``Authorization: Bearer``; a client's own headers are never passed on.

The client notes when each engine last sent a request's bytes (headers or
body): traffic in flight is evidence that the engine is alive, which the
monitor weighs against a health check that is late under load.
"""

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.request.errors import (
    EngineStatusError,
    GatewayError,
    PoolExhausted,
    UpstreamFailed,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from app.settings import Settings

log = logging.getLogger("gateway.engine")

# The engine's statuses that mean "try again later", which a gateway 503/429
# never sends without a Retry-After.
_TRY_AGAIN = (429, 503)
# An idle connection is dropped before the engine drops it: vLLM's server
# (uvicorn) closes connections idle for 5 s, and a request sent on one just
# as it closes fails without an answer. (aiohttp also sends such a request
# once more on a new connection when a kept-alive one turns out closed.)
_KEEPALIVE_SECONDS = 3.0
# What aiohttp raises for a transport failure (its timeouts are TimeoutErrors).
_FAILURES = (aiohttp.ClientError, TimeoutError)
# A connection that broke before the answer began (a connection never made,
# ``ClientConnectorError``, is a ``ClientOSError`` too, and is not one).
_BROKEN_BEFORE_ANSWER = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
# The current span's context (a request's engine call, ``app.observe.tracing``) as
# the engine's ``traceparent``: vLLM's span of the request is its child.
# Nothing is written when no span is recorded (tracing off).
_TRACE_CONTEXT = TraceContextTextMapPropagator()


@dataclass(frozen=True)
class Answer:
    """A small answer read whole (health, models, metrics)."""

    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class EngineResponse:
    """An engine's 2xx answer whose body is still to be read: chunk by chunk
    (``chunks``) or whole (``read``). ``close`` drops its connection unless
    the body was read to its end: for a stream cut short, that is what tells
    the engine to abort the request."""

    def __init__(self, response: aiohttp.ClientResponse, client: "EngineClient", engine: str):
        self._response = response
        self._client = client
        self._engine = engine
        self.status = response.status
        # Its media type as the engine said it (a transcription as text is
        # text/plain; everything else JSON).
        self.content_type = response.headers.get("content-type", "application/json")
        self._closed = False

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives: every read returns the bytes buffered so far."""
        heard, engine = self._client._heard_at, self._engine
        content = self._response.content
        try:
            while True:
                chunk = await content.readany()
                if not chunk:
                    return
                heard[engine] = time.monotonic()
                yield chunk
        except _FAILURES as exc:
            raise _gateway_error(exc, answering=True, pool_full=False) from exc

    async def read(self) -> bytes:
        try:
            body = await self._response.read()
        except _FAILURES as exc:
            raise _gateway_error(exc, answering=True, pool_full=False) from exc
        self._client._heard_at[self._engine] = time.monotonic()
        return body

    def close(self) -> None:
        """Done with it (once; safe to call again). A body read to its end
        has given its connection back to the pool already."""
        if not self._closed:
            self._closed = True
            self._client._open -= 1
            self._response.close()


class EngineClient:
    def __init__(self, settings: Settings) -> None:
        connect = settings.upstream_connect_timeout
        # ``connect`` bounds the wait for a free connection in the pool and
        # the connect itself; ``sock_read`` is the idle limit between two
        # reads (the response headers included).
        self._stream_timeout = aiohttp.ClientTimeout(
            connect=connect, sock_connect=connect, sock_read=settings.upstream_read_timeout
        )
        self._non_stream_timeout = aiohttp.ClientTimeout(
            connect=connect, sock_connect=connect, sock_read=settings.upstream_non_stream_timeout
        )
        self._limit = settings.upstream_max_connections
        self._retry_after = settings.retry_after_unavailable
        self._heard_at: dict[str, float] = {}
        self._refused_key: set[tuple[str, str]] = set()
        # Responses handed out and not closed yet: how full the pool is.
        self._open = 0
        self._headers = _engine_key(settings)
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        # Made on first use, inside the running event loop.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._limit, limit_per_host=0, keepalive_timeout=_KEEPALIVE_SECONDS
                ),
                headers=self._headers,
                auto_decompress=False,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def open(
        self,
        engine: str,
        path: str,
        body: bytes,
        request_id: str,
        *,
        stream: bool,
        timeout: float | None = None,
        content_type: str = "application/json",
    ) -> EngineResponse:
        """Send a request and return once the engine's response headers are in.

        The body is left unread. A non-2xx answer is read (it is small) and
        raised as ``EngineStatusError``; the caller owns a 2xx response and
        must close it. ``timeout``: the whole call's limit, for small calls
        (else the streaming or non-streaming idle limit).
        """
        post = self._http().post
        headers = {"content-type": content_type, "x-request-id": request_id}
        _TRACE_CONTEXT.inject(headers)
        limits = self._stream_timeout if stream else self._non_stream_timeout
        if timeout is not None:
            limits = aiohttp.ClientTimeout(total=timeout)
        try:
            try:
                response = await post(engine + path, data=body, headers=headers, timeout=limits)
            except aiohttp.ClientConnectorError:
                raise  # never connected: nothing to send again
            except _BROKEN_BEFORE_ANSWER:
                # Closed or reset before any answer: a kept-alive connection
                # the engine closed as the request went out (it never read
                # it; a reset when the close raced the send). Once more, on
                # another connection. (aiohttp does so itself only for
                # idempotent methods.)
                response = await post(engine + path, data=body, headers=headers, timeout=limits)
        except _FAILURES as exc:
            raise _gateway_error(exc, answering=False, pool_full=self._open >= self._limit) from exc
        self._heard_at[engine] = time.monotonic()
        self._open += 1
        answer = EngineResponse(response, self, engine)
        if response.status >= 400:
            try:
                content = await answer.read()
            except GatewayError:
                content = b""
            finally:
                answer.close()
            raise EngineStatusError(response.status, content, self._retry_after_of(response))
        return answer

    def _retry_after_of(self, response: aiohttp.ClientResponse) -> float | None:
        if response.status not in _TRY_AGAIN:
            return None
        told = _retry_after(response.headers.get("retry-after"))
        return told if told is not None else self._retry_after

    def heard_at(self, engine: str) -> float:
        """When the engine last sent bytes of a request's answer (monotonic)."""
        return self._heard_at.get(engine, -float("inf"))

    async def get(self, engine: str, path: str, *, timeout: float) -> Answer:
        """A small GET (health, models, metrics), read whole within ``timeout``.
        Raises the gateway's errors: ``UpstreamTimeout`` for an engine that was
        reached and answered late, ``PoolExhausted`` for the gateway's own full
        pool, ``UpstreamUnreachable`` for one not reached."""
        # Each step within ``timeout``: the pool wait and connect, every read.
        limits = aiohttp.ClientTimeout(connect=timeout, sock_connect=timeout, sock_read=timeout)
        try:
            async with self._http().get(engine + path, timeout=limits) as response:
                answer = Answer(response.status, await response.read())
        except _FAILURES as exc:
            raise _gateway_error(exc, answering=False, pool_full=self._open >= self._limit) from exc
        self._note_key_refusal(engine, path, answer.status)
        return answer

    def _note_key_refusal(self, engine: str, path: str, status: int) -> None:
        """An engine started with --api-key answers 401 on /v1/* without the
        right key while its /health passes: it looks down for no visible
        reason. Said once, until it answers otherwise."""
        if status != 401:
            self._refused_key.discard((engine, path))
        elif (engine, path) not in self._refused_key:
            self._refused_key.add((engine, path))
            log.warning(
                "engine %s answers 401 on %s: started with --api-key? Give the gateway that key"
                " (GATEWAY_UPSTREAM_API_KEY)",
                engine,
                path,
            )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _engine_key(settings: Settings) -> dict[str, str]:
    """The engines' own key (vLLM's --api-key) on every call: completions,
    health, models and metrics alike. Only this client's headers and the
    ones each call names go upstream, never the client's."""
    key = settings.upstream_api_key
    return {"authorization": f"Bearer {key.get_secret_value()}"} if key else {}


def _gateway_error(exc: Exception, *, answering: bool, pool_full: bool) -> GatewayError:
    """The gateway's error for a transport error, before the engine's answer
    began (``answering`` False) or while its body was being read.
    ``pool_full``: every connection the gateway may open was in use."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        # The wait for a connection from the pool, or the connect itself.
        if pool_full:
            return PoolExhausted(
                "no free connection to the engine in the gateway's pool; retry shortly",
                retry_after=1,
            )
        return UpstreamUnreachable(f"engine not reachable: {exc!r}")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamUnreachable(f"engine not reachable: {exc!r}")
    if isinstance(exc, TimeoutError):
        if answering:
            return UpstreamTimeout("the engine stopped sending (read timeout)")
        return UpstreamTimeout("engine did not answer in time")
    return UpstreamFailed(f"the engine connection broke: {exc!r}")


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(1.0, float(value))
    except ValueError:
        return None
