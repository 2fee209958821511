"""Queue status for a waiting stream (``app.request.queue_status``), in-process: the
head at once, comments with the place and the wait while queued, then the
stream — or, refused after the head went out, the SSE error event with the
wait. Against the real engine and the OpenAI SDK: tests/e2e/test_queue_status.py."""

import asyncio
import json
from typing import Any

from tests.support.asgi import Exchange, InProcessGateway, in_process_gateway
from tests.support.asgi_streams import events
from tests.support.scripted_engine import DONE, MODEL, EngineCall, chunk
from tests.support.wait import wait_for

COMPLETIONS = "/v1/completions"
STREAM: dict[str, Any] = {"model": MODEL, "prompt": "hello", "max_tokens": 16, "stream": True}
ASK = {"x-queue-status": "on"}


async def holding(gateway: InProcessGateway) -> tuple[Exchange, EngineCall]:
    """A stream that takes the gateway's one sequence."""
    holder = gateway.request(COMPLETIONS, STREAM)
    call = await gateway.engine.calls.get()
    call.stream()
    await holder.wait_for(lambda e: e.status == 200)
    return holder, call


def comments(exchange: Exchange) -> list[bytes]:
    return [e for e in events(exchange) if e.startswith(b": queued")]


async def test_a_queued_stream_is_told_its_place_then_streams() -> None:
    async with in_process_gateway(max_concurrency=1, queue_status_interval=0.05) as gateway:
        holder, held = await holding(gateway)
        queued = gateway.request(COMPLETIONS, STREAM, headers=ASK)
        async with asyncio.timeout(10):
            await queued.wait_for(lambda e: len(comments(e)) >= 2)
        assert queued.status == 200
        assert comments(queued)[0].startswith(b": queued position=1")
        assert gateway.engine.calls.empty()
        held.send(chunk("a") + DONE)
        held.end()
        await holder.done()
        call = await gateway.engine.calls.get()
        call.stream()
        call.send(chunk("b") + DONE)
        call.end()
        await queued.done()
        body = queued.body
        assert body.endswith(chunk("b") + DONE)
        assert body[: body.index(b"data:")].count(b": queued position=1") >= 2
        assert gateway.metric("gateway_requests_total", outcome="completed") == 2


async def test_refused_after_the_head_the_error_event_carries_the_wait() -> None:
    async with in_process_gateway(
        max_concurrency=1, queue_status_interval=0.05, queue_timeout=0.3
    ) as gateway:
        holder, held = await holding(gateway)
        queued = await gateway.request(COMPLETIONS, STREAM, headers=ASK).done()
        assert queued.status == 200
        assert comments(queued)
        error = json.loads(events(queued)[-1][len(b"data: ") :])["error"]
        assert error["code"] == "over_capacity"
        assert isinstance(error["retry_after"], int)
        assert error["retry_after"] >= 1
        assert gateway.metric("gateway_rejections_total", reason="queue_timeout") == 1
        held.send(DONE)
        held.end()
        await holder.done()
        assert await wait_for(gateway.settled, timeout=10)


async def test_without_the_header_nothing_changes() -> None:
    async with in_process_gateway(
        max_concurrency=1, queue_status_interval=0.05, queue_timeout=0.3
    ) as gateway:
        holder, held = await holding(gateway)
        queued = await gateway.request(COMPLETIONS, STREAM).done()
        assert queued.status == 429
        assert int(queued.headers["retry-after"]) >= 1
        held.send(DONE)
        held.end()
        await holder.done()


async def test_a_request_admitted_at_once_gets_no_comment() -> None:
    async with in_process_gateway(queue_status_interval=0.05) as gateway:
        exchange = gateway.request(COMPLETIONS, STREAM, headers=ASK)
        call = await gateway.engine.calls.get()
        call.stream()
        call.send(chunk("a") + DONE)
        call.end()
        await exchange.done()
        assert exchange.body == chunk("a") + DONE


async def test_a_client_that_leaves_while_told_its_place_is_cancelled_while_queued() -> None:
    async with in_process_gateway(max_concurrency=1, queue_status_interval=0.05) as gateway:
        holder, held = await holding(gateway)
        queued = gateway.request(COMPLETIONS, STREAM, headers=ASK)
        async with asyncio.timeout(10):
            await queued.wait_for(lambda e: len(comments(e)) >= 1)
        queued.disconnect()
        await queued.done()
        assert gateway.metric("gateway_cancellations_total", phase="queued") == 1
        assert gateway.engine.calls.empty()
        held.send(DONE)
        held.end()
        await holder.done()
        assert await wait_for(gateway.settled, timeout=10)
