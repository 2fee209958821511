"""The sockets under the engine client: plain asyncio, no cancel scope per read.

httpcore's default network backend wraps every read in ``anyio.fail_after``:
a cancel scope entered and left (and ``asyncio.current_task`` looked up) for
each chunk the engine sends, which on a relayed stream is once per token.
This backend keeps the same contract (``httpcore.AsyncNetworkBackend``, its
exceptions, its timeouts) on an ``asyncio.Protocol``: bytes that arrived are
returned without waiting, and a timer is armed only when a read has to wait.

Flow control both ways: reading pauses while more than ``_HIGH_WATER`` bytes
are buffered and unread (a slow client must slow the engine, not grow the
gateway's memory), and a write waits while the transport says its buffer is
full.
"""

import asyncio
import contextlib
import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any, cast

import httpcore
import httpx
from httpcore import (
    AsyncNetworkBackend,
    AsyncNetworkStream,
    ConnectError,
    ConnectTimeout,
    ReadError,
    ReadTimeout,
    WriteError,
    WriteTimeout,
)

SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)

_HIGH_WATER = 256 * 1024


class _Connection(asyncio.Protocol):
    """What the event loop tells us about one socket, kept for the reader."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self.reading_paused = False
        self._readable: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None

    # --- called by the loop ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have asyncio's methods but not its classes.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _HIGH_WATER and self.transport is not None:
            self.transport.pause_reading()
            self.reading_paused = True
        self._wake_reader()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake_reader()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    # --- used by the stream ---------------------------------------------------

    def _wake_reader(self) -> None:
        if self._readable is not None and not self._readable.done():
            self._readable.set_result(None)

    async def wait_readable(self, timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        self._readable = waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            self._readable = None
            if timer is not None:
                timer.cancel()

    async def wait_writable(self, timeout: float | None) -> None:
        waiter = self._writable
        if waiter is None:
            return
        async with asyncio.timeout(timeout):
            await asyncio.shield(waiter)


def _expire(waiter: "asyncio.Future[None]") -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class AsyncioStream(AsyncNetworkStream):
    def __init__(self, connection: _Connection) -> None:
        self._connection = connection

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        connection = self._connection
        if not connection.buffer and not connection.eof:
            try:
                await connection.wait_readable(timeout)
            except TimeoutError as exc:
                raise ReadTimeout("timed out reading from the engine") from exc
        if connection.buffer:
            data = bytes(connection.buffer[:max_bytes])
            del connection.buffer[:max_bytes]
            if connection.reading_paused and len(connection.buffer) <= _HIGH_WATER // 2:
                connection.reading_paused = False
                if connection.transport is not None:
                    connection.transport.resume_reading()
            return data
        if connection.error is not None:
            raise ReadError(str(connection.error)) from connection.error
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        connection = self._connection
        transport = connection.transport
        if transport is None or transport.is_closing():
            raise WriteError("the engine connection is closed")
        try:
            transport.write(buffer)
            await connection.wait_writable(timeout)
        except TimeoutError as exc:
            raise WriteTimeout("timed out writing to the engine") from exc
        except OSError as exc:
            raise WriteError(str(exc)) from exc
        if connection.error is not None:
            raise WriteError(str(connection.error)) from connection.error

    async def aclose(self) -> None:
        transport = self._connection.transport
        if transport is not None:
            transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> AsyncNetworkStream:
        connection = self._connection
        assert connection.transport is not None
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(
                    connection.transport, connection, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError as exc:
            await self.aclose()
            raise ConnectTimeout("timed out in the TLS handshake") from exc
        except (OSError, ssl.SSLError) as exc:
            await self.aclose()
            raise ConnectError(str(exc)) from exc
        connection.transport = cast(asyncio.Transport, transport)
        return self

    def get_extra_info(self, info: str) -> Any:
        connection = self._connection
        transport = connection.transport
        if transport is None:
            return None
        if info == "ssl_object":
            return transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return transport.get_extra_info("sockname")
        if info == "server_addr":
            return transport.get_extra_info("peername")
        if info == "socket":
            return transport.get_extra_info("socket")
        if info == "is_readable":
            # httpcore asks this of an idle pooled connection: anything to
            # read (or the engine having closed it) means it cannot be reused.
            # The socket is asked too: a close that reached the kernel but
            # not yet the protocol (the loop is busy) counts.
            if connection.eof or connection.buffer:
                return True
            sock = transport.get_extra_info("socket")
            return sock is not None and _socket_readable(sock.fileno())
        return None


class AsyncioBackend(AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = None if local_address is None else (local_address, 0)
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(
                    _Connection, host, port, local_addr=local
                )
        except TimeoutError as exc:
            raise ConnectTimeout(f"timed out connecting to {host}:{port}") from exc
        except OSError as exc:
            raise ConnectError(str(exc)) from exc
        _apply(connection, socket_options)
        return AsyncioStream(connection)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_unix_connection(_Connection, path)
        except TimeoutError as exc:
            raise ConnectTimeout(f"timed out connecting to {path}") from exc
        except OSError as exc:
            raise ConnectError(str(exc)) from exc
        _apply(connection, socket_options)
        return AsyncioStream(connection)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _socket_readable(fd: int) -> bool:
    if fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _apply(connection: _Connection, options: Iterable[SocketOption] | None) -> None:
    """Socket options as httpcore passes them (asyncio already sets TCP_NODELAY)."""
    if not options or connection.transport is None:
        return
    sock: socket.socket | None = connection.transport.get_extra_info("socket")
    if sock is None:
        return
    for option in options:
        with contextlib.suppress(OSError):
            sock.setsockopt(*option)


# An idle connection is dropped before the engine drops it: vLLM's server
# (uvicorn) closes connections idle for 5 s, and a request sent on one just
# as it closes fails without an answer.
KEEPALIVE_EXPIRY = 3.0


def engine_transport(
    max_connections: int, max_keepalive: int, keepalive_expiry: float = KEEPALIVE_EXPIRY
) -> httpx.AsyncHTTPTransport:
    """httpx's transport with httpcore's pool (HTTP/1.1, limits, keep-alive)
    on this backend. httpx takes no network backend, so its pool is replaced."""
    transport = httpx.AsyncHTTPTransport()
    transport._pool = httpcore.AsyncConnectionPool(
        max_connections=max_connections,
        max_keepalive_connections=max_keepalive,
        keepalive_expiry=keepalive_expiry,
        network_backend=AsyncioBackend(),
    )
    return transport
