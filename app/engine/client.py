"""The HTTP client for the engines.

One ``httpx.AsyncClient`` per app, for every engine (its pool keeps
connections per engine), with pool limits and timeouts from the settings, on
the sockets of ``app.engine.network``.
Every call names the engine's base URL. The one translation of httpx's
transport errors into the gateway's own (``_gateway_error``) is here, for
the request, the response headers and every read of the body alike: nothing
above this module sees an httpx exception from a request's call. (The
monitor's small GETs keep httpx's errors: a health check weighs them itself.)

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

import contextlib
import logging
import time
from collections.abc import AsyncIterator

import anyio
import httpx

from app.engine.network import engine_transport
from app.errors import (
    EngineStatusError,
    GatewayError,
    PoolExhausted,
    UpstreamFailed,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from app.settings import Settings

log = logging.getLogger("gateway.engine")

_CLOSE_TIMEOUT = 5.0
# The engine's statuses that mean "try again later", which a gateway 503/429
# never sends without a Retry-After.
_TRY_AGAIN = (429, 503)


class EngineClient:
    def __init__(self, settings: Settings):
        self._stream_timeout = httpx.Timeout(
            connect=settings.upstream_connect_timeout,
            read=settings.upstream_read_timeout,
            write=settings.upstream_read_timeout,
            pool=settings.upstream_connect_timeout,
        )
        self._non_stream_timeout = httpx.Timeout(
            connect=settings.upstream_connect_timeout,
            read=settings.upstream_non_stream_timeout,
            write=settings.upstream_read_timeout,
            pool=settings.upstream_connect_timeout,
        )
        self._retry_after = settings.retry_after_unavailable
        self._heard_at: dict[str, float] = {}
        self._refused_key: set[tuple[str, str]] = set()
        self._http = httpx.AsyncClient(
            timeout=self._stream_timeout,
            transport=engine_transport(
                settings.upstream_max_connections, settings.upstream_max_keepalive
            ),
            headers=_engine_key(settings),
        )

    async def open(
        self, engine: str, path: str, body: bytes, request_id: str, *, stream: bool
    ) -> httpx.Response:
        """Send a request and return once the engine's response headers are in.

        The body is left unread. A non-2xx answer is read (it is small) and
        raised as ``EngineStatusError``; the caller owns a 2xx response and
        must close it.
        """
        request = self._http.build_request(
            "POST",
            engine + path,
            content=body,
            headers={"content-type": "application/json", "x-request-id": request_id},
            timeout=self._stream_timeout if stream else self._non_stream_timeout,
        )
        try:
            try:
                response = await self._http.send(request, stream=True)
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
                # Closed or reset before any answer: a kept-alive connection
                # the engine closed as the request went out (it never read
                # it; a reset when the close raced the send). Once more, on
                # another connection.
                response = await self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise _gateway_error(exc, answering=False) from exc

        self._heard_at[engine] = time.monotonic()
        response.stream = _NotedStream(response.stream, self._heard_at, engine)
        if response.status_code >= 400:
            try:
                content = await response.aread()
            finally:
                await close_quietly(response)
            raise EngineStatusError(response.status_code, content, self._retry_after_of(response))
        return response

    def _retry_after_of(self, response: httpx.Response) -> float | None:
        if response.status_code not in _TRY_AGAIN:
            return None
        told = _retry_after(response.headers.get("retry-after"))
        return told if told is not None else self._retry_after

    def heard_at(self, engine: str) -> float:
        """When the engine last sent bytes of a request's answer (monotonic)."""
        return self._heard_at.get(engine, -float("inf"))

    async def get(self, engine: str, path: str, *, timeout: float) -> httpx.Response:
        """A small GET (health, models, metrics); transport errors propagate as httpx errors."""
        response = await self._http.get(engine + path, timeout=timeout)
        self._note_key_refusal(engine, path, response.status_code)
        return response

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
        await self._http.aclose()


def _engine_key(settings: Settings) -> dict[str, str]:
    """The engines' own key (vLLM's --api-key) on every call: completions,
    health, models and metrics alike. Only this client's headers and the
    ones each call names go upstream, never the client's."""
    key = settings.upstream_api_key
    return {"authorization": f"Bearer {key.get_secret_value()}"} if key else {}


async def close_quietly(response: httpx.Response) -> None:
    """Close an upstream response even while the calling task is being
    cancelled: closing the connection is what tells the engine to abort."""
    with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
        with contextlib.suppress(httpx.HTTPError):
            await response.aclose()


class _NotedStream(httpx.AsyncByteStream):
    """An answer's body, noting the time of every chunk the engine sends, its
    transport errors turned into the gateway's."""

    def __init__(self, stream: object, heard_at: dict[str, float], engine: str) -> None:
        assert isinstance(stream, httpx.AsyncByteStream)
        self._stream = stream
        self._heard_at = heard_at
        self._engine = engine

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                self._heard_at[self._engine] = time.monotonic()
                yield chunk
        except httpx.HTTPError as exc:
            raise _gateway_error(exc, answering=True) from exc

    async def aclose(self) -> None:
        await self._stream.aclose()


def _gateway_error(exc: httpx.HTTPError, *, answering: bool) -> GatewayError:
    """The gateway's error for a transport error, before the engine's answer
    began (``answering`` False) or while its body was being read."""
    if isinstance(exc, httpx.PoolTimeout):
        return PoolExhausted(
            "no free connection to the engine in the gateway's pool; retry shortly",
            retry_after=1,
        )
    if isinstance(exc, httpx.ConnectTimeout | httpx.ConnectError):
        return UpstreamUnreachable(f"engine not reachable: {exc!r}")
    if isinstance(exc, httpx.TimeoutException):
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
