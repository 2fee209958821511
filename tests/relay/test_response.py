"""How a relayed stream ends, in-process, with admission on: the engine
breaking, stalling or finishing, the client leaving or not reading, the
drain's deadline. Each ends in one outcome, closes the engine's response and
leaves nothing queued, in flight or reserved."""

import json

import anyio
import httpx
import pytest

from app.drain import Drain
from tests.support.asgi import Exchange, InProcessGateway, in_process_gateway
from tests.support.scripted_engine import DONE, MODEL, EngineCall, chunk, usage_chunk

STREAM = {"model": MODEL, "prompt": "hello", "max_tokens": 16, "stream": True}


async def open_stream(gateway: InProcessGateway, **fields: object) -> tuple[Exchange, EngineCall]:
    exchange = gateway.request("/v1/completions", {**STREAM, **fields})
    call = await gateway.engine.calls.get()
    call.stream()
    await exchange.wait_for(lambda e: e.status == 200)
    return exchange, call


def events(exchange: Exchange) -> list[bytes]:
    return [event for event in exchange.body.split(b"\n\n") if event]


def final_error(exchange: Exchange) -> dict[str, object]:
    error: dict[str, object] = json.loads(events(exchange)[-1][6:])["error"]
    return error


async def test_a_whole_stream_completes_and_usage_is_dropped_unless_asked() -> None:
    async with in_process_gateway() as gateway:
        exchange, call = await open_stream(gateway)
        call.send(chunk("a") + chunk("b", finish="length"))
        call.send(usage_chunk(3, 2) + DONE)
        call.end()
        await exchange.done()
        assert events(exchange) == [chunk("a")[:-2], chunk("b", "length")[:-2], DONE[:-2]]
        assert gateway.metric("gateway_requests_total", outcome="completed") == 1
        assert gateway.metric("gateway_tokens_total", kind="completion") == 2
        assert call.closed.is_set()
        assert gateway.settled()


async def test_content_still_arrives_with_continuous_usage_stats() -> None:
    """A content chunk that carries usage (continuous usage stats) is never
    dropped, even when the client did not ask for the usage chunk."""
    async with in_process_gateway() as gateway:
        exchange, call = await open_stream(gateway)
        assert call.body["stream_options"] == {
            "include_usage": True,
            "continuous_usage_stats": False,
        }
        with_usage = json.loads(chunk("a")[6:])
        with_usage["usage"] = {"prompt_tokens": 3, "completion_tokens": 1}
        call.send(
            b"data: " + json.dumps(with_usage, separators=(",", ":")).encode() + b"\n\n" + DONE
        )
        call.end()
        await exchange.done()
        assert b'"text":"a"' in exchange.body


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (httpx.ReadError("connection reset by peer"), "engine_error"),
        (httpx.ReadTimeout("idle"), "engine_timeout"),
    ],
    ids=["engine-dies", "idle-timeout"],
)
async def test_an_engine_failure_mid_stream_ends_with_one_error_event(
    error: Exception, code: str
) -> None:
    async with in_process_gateway() as gateway:
        exchange, call = await open_stream(gateway)
        call.send(chunk("a"))
        call.fail(error)
        await exchange.done()
        assert final_error(exchange)["code"] == code
        assert gateway.metric("gateway_requests_total", outcome="failed") == 1
        assert call.closed.is_set()
        assert gateway.settled()


async def test_a_stream_without_done_is_a_failure() -> None:
    async with in_process_gateway() as gateway:
        exchange, call = await open_stream(gateway)
        call.send(chunk("a"))
        call.end()
        await exchange.done()
        assert final_error(exchange)["code"] == "engine_error"
        assert gateway.settled()


async def test_the_client_leaving_mid_stream_is_a_cancellation() -> None:
    async with in_process_gateway() as gateway:
        exchange, call = await open_stream(gateway)
        call.send(chunk("a"))
        await exchange.wait_for(lambda e: b'"a"' in e.body)
        exchange.disconnect()
        await exchange.done()
        assert gateway.metric("gateway_cancellations_total", phase="streaming") == 1
        assert call.closed.is_set()
        assert gateway.settled()


async def test_a_client_that_stops_reading_is_dropped_at_the_send_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with in_process_gateway(sse_send_timeout=0.2, sse_ping_seconds=0) as gateway:
        exchange, call = await open_stream(gateway)
        exchange.stop_reading_after(1)
        call.send(chunk("a"))
        call.send(chunk("b"))
        await exchange.done()
        assert gateway.metric("gateway_rejections_total", reason="slow_reader") == 1
        assert call.closed.is_set()
        assert gateway.settled()
    dropped = [r for r in caplog.records if "stopped reading" in r.getMessage()]
    assert len(dropped) == 1
    assert dropped[0].exc_info is None


async def test_the_drain_deadline_ends_a_stream_whose_engine_is_silent() -> None:
    drain = Drain()
    async with in_process_gateway(drain=drain) as gateway:
        exchange, call = await open_stream(gateway)
        call.send(chunk("a"))
        await exchange.wait_for(lambda e: b'"a"' in e.body)
        drain.begin()
        drain.stop_streams()
        # No further byte from the engine: the error event goes out anyway.
        await exchange.done()
        assert final_error(exchange)["code"] == "draining"
        assert not exchange.messages[-1].get("more_body")
        assert gateway.metric("gateway_requests_total", outcome="failed") == 1
        assert call.closed.is_set()
        assert gateway.settled()


async def test_a_stream_still_waiting_for_its_engine_at_the_deadline_is_answered_at_once() -> None:
    drain = Drain()
    async with in_process_gateway(drain=drain) as gateway:
        exchange = gateway.request("/v1/completions", STREAM)
        call = await gateway.engine.calls.get()
        # The engine has not answered the request's headers yet: the drain's
        # deadline does not wait for them.
        drain.stop_streams()
        await exchange.done()
        assert exchange.status == 503
        assert json.loads(exchange.body)["error"]["code"] == "draining"
        # The engine's call was given up (its answer will never be read).
        assert call._answer.cancelled()
        assert gateway.metric("gateway_requests_total", outcome="failed") == 1
        assert gateway.settled()


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
