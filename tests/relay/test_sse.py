"""Sending a relayed stream to its client (``app.relay.sse``), in-process:
the send timeout that drops a client that stopped reading, and the pings
that keep a silent stream alive (or none, when turned off), and what the
gateway adds to a stream's first event."""

import anyio
import pytest

from tests.support.asgi import in_process_gateway
from tests.support.asgi_streams import open_stream
from tests.support.scripted_engine import DONE, chunk


async def test_a_client_that_stops_reading_is_dropped_at_the_send_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with in_process_gateway(sse_send_timeout=0.2, sse_ping_seconds=0) as gateway:
        exchange, call = await open_stream(gateway)
        exchange.stop_reading_after(1)
        call.send(chunk("a"))
        # "b" apart from "a": sent together, one read could bring both and
        # the one send that carries them would not block.
        await exchange.wait_for(lambda e: b'"a"' in e.body)
        call.send(chunk("b"))
        await exchange.done()
        assert gateway.metric("gateway_rejections_total", reason="slow_reader") == 1
        await call.wait_closed()
        assert gateway.settled()
    dropped = [r for r in caplog.records if "stopped reading" in r.getMessage()]
    assert len(dropped) == 1
    assert dropped[0].exc_info is None


async def test_pings_keep_a_silent_stream_alive() -> None:
    async with in_process_gateway(sse_ping_seconds=0.05) as gateway:
        exchange, call = await open_stream(gateway)
        await exchange.wait_for(lambda e: b": ping" in e.body)
        call.send(chunk("a") + DONE)
        call.end()
        await exchange.done()
        assert gateway.metric("gateway_requests_total", outcome="completed") == 1


async def test_no_pings_when_they_are_turned_off() -> None:
    async with in_process_gateway(sse_ping_seconds=0, sse_send_timeout=0.2) as gateway:
        exchange, call = await open_stream(gateway)
        # Longer than the send timeout: the time keeper woke up several times
        # while the engine was silent, and sent nothing.
        await anyio.sleep(0.5)
        call.send(chunk("a") + DONE)
        call.end()
        await exchange.done()
        assert b"ping" not in exchange.body
        assert gateway.metric("gateway_requests_total", outcome="completed") == 1


async def test_what_the_gateway_adds_to_a_streams_first_event_is_measured_once() -> None:
    async with in_process_gateway(sse_ping_seconds=0) as gateway:
        exchange, call = await open_stream(gateway)
        exchange.stop_reading_after(0)  # the client's socket is full from the start
        call.send(chunk("a"))
        await exchange.send_blocked.wait()  # the first event read, its send waiting
        await anyio.sleep(0.3)  # how long the client takes: a lower bound below
        exchange.read_again()
        call.send(chunk("b") + DONE)
        call.end()
        await exchange.done()
        assert gateway.metric("gateway_first_event_added_seconds_count") == 1
        assert gateway.metric("gateway_first_event_added_seconds_sum") >= 0.3
