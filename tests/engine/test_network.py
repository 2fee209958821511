"""The engine client's sockets, against a real local TCP server whose every
move the test makes: bytes already there, a read that must wait and one that
times out, the engine closing mid-body, a refused connection, a reader that
falls behind (reading pauses, then resumes), and the client closing (the
engine sees its end of the connection close)."""

import asyncio
import contextlib
import select
import socket
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpcore
import httpx
import pytest
import uvloop

from app.engine import network
from app.engine.client import EngineClient
from app.engine.network import AsyncioBackend, AsyncioStream, engine_transport
from app.settings import Settings


@dataclass
class Peer:
    """The server's side of the one connection the test opens."""

    connected: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = field(
        default_factory=asyncio.Queue
    )
    writers: list[asyncio.StreamWriter] = field(default_factory=list)


@asynccontextmanager
async def server() -> AsyncIterator[tuple[int, Peer]]:
    peer = Peer()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer.writers.append(writer)
        await peer.connected.put((reader, writer))

    srv = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield port, peer
    finally:
        for writer in peer.writers:
            writer.close()
        srv.close()
        await srv.wait_closed()


async def test_a_read_returns_what_arrived_and_waits_for_more() -> None:
    async with server() as (port, peer):
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
        _, writer = await peer.connected.get()
        writer.write(b"first")
        await writer.drain()
        assert await stream.read(1024, timeout=5) == b"first"

        later = asyncio.create_task(stream.read(1024, timeout=5))
        await asyncio.sleep(0)
        assert not later.done()
        writer.write(b"second")
        assert await later == b"second"
        await stream.aclose()


async def test_a_read_takes_at_most_max_bytes_and_keeps_the_rest() -> None:
    async with server() as (port, peer):
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
        _, writer = await peer.connected.get()
        writer.write(b"abcdef")
        await writer.drain()
        got = b""
        while len(got) < 6:
            got += await stream.read(4, timeout=5)
        assert got == b"abcdef"
        await stream.aclose()


async def test_a_read_with_nothing_coming_times_out() -> None:
    async with server() as (port, peer):
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
        await peer.connected.get()
        with pytest.raises(httpcore.ReadTimeout):
            await stream.read(1024, timeout=0.05)
        await stream.aclose()


async def test_the_engine_closing_reads_as_end_of_stream() -> None:
    async with server() as (port, peer):
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
        _, writer = await peer.connected.get()
        writer.write(b"last")
        writer.close()
        assert await stream.read(1024, timeout=5) == b"last"
        assert await stream.read(1024, timeout=5) == b""
        assert stream.get_extra_info("is_readable") is True  # not reusable
        await stream.aclose()


async def test_a_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(httpcore.ConnectError):
            await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)


async def test_a_reader_that_falls_behind_pauses_the_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(network, "_HIGH_WATER", 1024)
    async with server() as (port, peer):
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
        _, writer = await peer.connected.get()
        writer.write(b"x" * 4096)
        await writer.drain()
        assert isinstance(stream, AsyncioStream)
        connection = stream._connection  # what the event loop was told
        for _ in range(500):
            if connection.reading_paused:
                break
            await asyncio.sleep(0.01)
        assert connection.reading_paused
        assert connection.transport is not None
        assert not connection.transport.is_reading()
        got = b""
        while len(got) < 4096:
            got += await stream.read(512, timeout=5)
        assert got == b"x" * 4096
        assert not connection.reading_paused
        assert connection.transport.is_reading()
        await stream.aclose()


async def test_an_http_stream_through_the_pool_and_its_close_reaches_the_engine() -> None:
    """httpx on this pool: the response arrives chunk by chunk, and closing it
    before the end closes the connection (how the engine learns to abort)."""
    async with (
        server() as (port, peer),
        httpx.AsyncClient(transport=engine_transport(4, 4)) as client,
    ):
        request = client.build_request("POST", f"http://127.0.0.1:{port}/x", content=b"{}")
        sending = asyncio.create_task(client.send(request, stream=True))
        reader, writer = await peer.connected.get()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"POST /x HTTP/1.1")
        assert await reader.readexactly(2) == b"{}"
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"
        )
        response = await sending
        chunks = response.aiter_raw()
        assert await anext(chunks) == b"hello"
        await response.aclose()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # the engine sees EOF


async def test_an_idle_connection_the_engine_closed_is_not_reused() -> None:
    """The engine's close counts as soon as it reaches the socket, before
    the event loop has told the protocol (a busy loop tells it late)."""
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        port = listener.getsockname()[1]
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
        assert isinstance(stream, AsyncioStream)
        engine_side, _ = listener.accept()
        assert stream.get_extra_info("is_readable") is False

        engine_side.close()
        # Wait for the close to arrive without running the event loop.
        fd = stream.get_extra_info("socket").fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        assert poller.poll(5000)
        assert not stream._connection.eof  # the protocol has not heard yet
        assert stream.get_extra_info("is_readable") is True
        await stream.aclose()
    finally:
        listener.close()


async def test_a_request_the_engine_closed_on_without_an_answer_is_sent_once_more() -> None:
    """A kept-alive connection the engine closes just as a request goes out:
    the request goes again on a new connection, and the caller sees one
    answer."""
    connections = 0
    requests = 0

    async def engine(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections, requests
        connections += 1
        first = connections == 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                requests += 1
                if first and requests == 2:
                    break  # the second request on the first connection: closed unanswered
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        writer.close()

    srv = await asyncio.start_server(engine, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    client = EngineClient(Settings(upstream_url=f"http://127.0.0.1:{port}"))
    try:
        for _ in range(2):
            response = await client.open(
                f"http://127.0.0.1:{port}", "/v1/completions", b"{}", "id", stream=False
            )
            assert (response.status_code, await response.aread()) == (200, b"ok")
            await response.aclose()
        assert (connections, requests) == (2, 3)
    finally:
        await client.aclose()
        srv.close()
        await srv.wait_closed()


@pytest.mark.parametrize(
    "scenario",
    [
        test_a_read_returns_what_arrived_and_waits_for_more,
        test_the_engine_closing_reads_as_end_of_stream,
        test_an_http_stream_through_the_pool_and_its_close_reaches_the_engine,
        test_an_idle_connection_the_engine_closed_is_not_reused,
    ],
)
def test_the_same_under_uvloop(scenario: Callable[[], Coroutine[None, None, None]]) -> None:
    """The gateway runs on uvloop, whose transports are not asyncio's classes."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())


def test_pausing_under_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(test_a_reader_that_falls_behind_pauses_the_socket(monkeypatch))
