"""Bounds on connections, in a real gateway process: a request head that does
not arrive in time gets 408 and a closed connection, and connections beyond
the limit are closed at once."""

import asyncio
import contextlib

from deploy.local import free_port
from tests.support.gateways import StartGateway
from tests.support.raw_http import close, connect, read_response


async def test_a_slow_request_head_is_cut_off(start_gateway: StartGateway) -> None:
    gateway = start_gateway(f"http://127.0.0.1:{free_port()}", head_timeout=1)
    reader, writer = await connect(gateway.url)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: gateway\r\n")
    await writer.drain()
    status, headers, body = await asyncio.wait_for(read_response(reader), timeout=60)
    assert status == 408
    assert headers["connection"] == "close"
    assert b"request_timeout" in body
    assert await asyncio.wait_for(reader.read(), timeout=60) == b""
    await close(writer)
    # A connection that sends nothing at all is cut off the same way.
    reader, writer = await connect(gateway.url)
    status, _, _ = await asyncio.wait_for(read_response(reader), timeout=60)
    assert status == 408
    await close(writer)


async def test_connections_beyond_the_limit_are_closed_at_once(
    start_gateway: StartGateway,
) -> None:
    gateway = start_gateway(f"http://127.0.0.1:{free_port()}", max_connections=3)
    held = [await connect(gateway.url) for _ in range(3)]
    reader, writer = await connect(gateway.url)
    with contextlib.suppress(ConnectionResetError):
        assert await asyncio.wait_for(reader.read(), timeout=60) == b""
    await close(writer)
    for _, held_writer in held:
        await close(held_writer)
    # With room again (once the gateway has seen those close), requests are served.
    for _ in range(600):
        reader, writer = await connect(gateway.url)
        writer.write(b"GET /health/live HTTP/1.1\r\nHost: gateway\r\n\r\n")
        try:
            status, _, _ = await asyncio.wait_for(read_response(reader), timeout=60)
        except (ConnectionError, IndexError):
            await asyncio.sleep(0.1)
            continue
        finally:
            await close(writer)
        assert status == 200
        return
    raise AssertionError("no room after the held connections closed")
