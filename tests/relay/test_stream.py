"""What a relayed stream forwards and what it says about the request
(``app.relay.stream``), in-process: the usage chunk dropped unless the
client asked for it, content carrying usage never taken for it, a stream
that ends without ``[DONE]`` a failure, and a stream due to reach its
``max_tokens`` within the time ahead saying so once, never on a pace
measured over less than half that time."""

import json

from tests.support.asgi import in_process_gateway
from tests.support.asgi_streams import events, final_error, open_stream
from tests.support.scripted_engine import DONE, chunk, usage_chunk


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
        await call.wait_closed()
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


async def test_a_stream_without_done_is_a_failure() -> None:
    async with in_process_gateway() as gateway:
        exchange, call = await open_stream(gateway)
        call.send(chunk("a"))
        call.end()
        await exchange.done()
        assert final_error(exchange)["code"] == "engine_error"
        assert gateway.settled()
