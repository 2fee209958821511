"""A TCP proxy in front of the real engine that can make its checks late or
the engine gone.

It forwards bytes both ways, untouched. With ``slow_checks`` on, the answer
to a request that starts ``GET /health`` or ``GET /metrics`` trickles back
one byte at a time, well within any read timeout but taking seconds in all:
an engine that answers its checks late, as vLLM does under load, while the
answers to completions on other connections flow at full speed. ``refuse``
closes the listening socket and every connection: an engine whose process
is gone (the kernel refuses new connections). ``closed`` and ``open``: a gate
that keeps the engine unreachable until it opens (an engine starting).
"""

import asyncio
import contextlib
from urllib.parse import urlsplit

from deploy.local import free_port

_CHECKS = (b"GET /health ", b"GET /metrics ")
# One byte of a late check's answer per this many seconds.
_TRICKLE = 0.05


class TcpProxy:
    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        assert parts.hostname is not None
        assert parts.port is not None
        self._upstream = (parts.hostname, parts.port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._connections: set[asyncio.Task[object]] = set()
        self.slow_checks = False
        # Checks whose answer trickled back, counted when it begins to: a
        # check already under way when ``slow_checks`` turns on counts too
        # (its answer trickles, and the gateway's monitor waits on it).
        self.slowed = 0
        self.url = ""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def closed(self) -> None:
        """Give the proxy its address without listening there yet: the
        engine behind it is not up (its connections refused) until ``open``."""
        self.url = f"http://127.0.0.1:{free_port()}"

    async def open(self) -> None:
        """Start listening at the address ``closed`` gave."""
        port = urlsplit(self.url).port
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", port)

    async def refuse(self) -> None:
        """Stop listening and drop every connection."""
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await self._server.wait_closed()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def aclose(self) -> None:
        if self._server is not None and self._server.is_serving():
            await self.refuse()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)
        self._writers.add(client_w)
        try:
            engine_r, engine_w = await asyncio.open_connection(*self._upstream)
        except OSError:
            client_w.transport.abort()
            self._writers.discard(client_w)
            return
        self._writers.add(engine_w)
        # Whether the request now on this connection is a check, and whether
        # its answer was counted as slowed.
        checking = [False, False]
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._requests(client_r, engine_w, checking))
                group.create_task(self._answers(engine_r, client_w, checking))
        except* OSError:
            pass
        finally:
            for writer in (client_w, engine_w):
                self._writers.discard(writer)
                writer.transport.abort()

    async def _requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, checking: list[bool]
    ) -> None:
        # The gateway's client sends one request at a time on a connection,
        # so a read that starts a request starts with its request line.
        while data := await reader.read(65536):
            if data.startswith(_CHECKS):
                checking[:] = [True, False]
            elif data[:5] in (b"POST ", b"GET /"):
                checking[:] = [False, False]
            writer.write(data)
            await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()

    async def _answers(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, checking: list[bool]
    ) -> None:
        while data := await reader.read(65536):
            while data and checking[0] and self.slow_checks:
                if not checking[1]:
                    checking[1] = True
                    self.slowed += 1
                writer.write(data[:1])
                data = data[1:]
                await writer.drain()
                await asyncio.sleep(_TRICKLE)
            writer.write(data)
            await writer.drain()
        writer.close()
