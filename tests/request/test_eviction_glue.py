"""A sheddable request stopped for a higher class, through the whole flight,
in-process against a scripted engine of one sequence: its client gets one
error in its API's shape (a stream's last event, with the wait; a whole
answer's 429 with ``Retry-After``), its engine call is closed (the engine
aborts it), it counts once as ``rejected``/``evicted``, and the blocked
request goes to the engine in its place. What the eviction benchmark
measures on a real engine is ``benchmarks/classes``'."""

from tests.support.asgi import Exchange, InProcessGateway, in_process_gateway
from tests.support.asgi_streams import final_error
from tests.support.scripted_engine import MODEL, EngineCall, chunk, next_call
from tests.support.wait import wait_for

COMPLETIONS = "/v1/completions"
HIGH = {"x-priority": "high", "x-slo-ttft-ms": "2000"}


async def low_stream(gateway: InProcessGateway) -> tuple[Exchange, EngineCall]:
    exchange = gateway.request(
        COMPLETIONS,
        {"model": MODEL, "prompt": "hi", "max_tokens": 1000, "stream": True},
        headers={"x-priority": "low"},
    )
    call = await gateway.engine.calls.get()
    call.stream()
    await exchange.wait_for(lambda e: e.status == 200)
    return exchange, call


async def test_a_running_low_stream_is_stopped_for_a_high_request_that_would_miss() -> None:
    async with in_process_gateway(max_concurrency=1) as gateway:
        low, call = await low_stream(gateway)
        call.send(chunk("a"))
        await low.wait_for(lambda e: b'"a"' in e.body)
        high = gateway.request(
            COMPLETIONS, {"model": MODEL, "prompt": "hi", "max_tokens": 4}, headers=HIGH
        )
        _, second = await next_call(gateway.engine)
        await low.done()
        error = final_error(low)
        assert error["code"] == "evicted"
        assert isinstance(error["retry_after"], int)
        assert error["retry_after"] >= 1
        await call.wait_closed()
        assert gateway.metric("gateway_rejections_total", reason="evicted") == 1
        second.answer(
            200,
            {"id": "x", "object": "text_completion", "choices": [],
             "usage": {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}},
        )  # fmt: skip
        await high.done()
        assert high.status == 200
        assert gateway.metric("gateway_requests_total", outcome="rejected") == 1
        assert gateway.metric("gateway_requests_total", outcome="completed") == 1
        assert gateway.settled()


async def test_a_whole_answer_stopped_for_a_higher_class_is_a_429_with_retry_after() -> None:
    async with in_process_gateway(max_concurrency=1) as gateway:
        low = gateway.request(
            COMPLETIONS,
            {"model": MODEL, "prompt": "hi", "max_tokens": 1000},
            headers={"x-priority": "low"},
        )
        call = await gateway.engine.calls.get()
        gateway.request(
            COMPLETIONS, {"model": MODEL, "prompt": "hi", "max_tokens": 4}, headers=HIGH
        )
        await low.done()
        assert low.status == 429
        assert low.json()["error"]["code"] == "evicted"
        assert int(low.headers["retry-after"]) >= 1
        await call.wait_closed()
        assert await wait_for(lambda: not gateway.engine.calls.empty(), timeout=10)


async def test_a_normal_request_is_never_stopped() -> None:
    """Normal is not sheddable: the high request waits for it."""
    async with in_process_gateway(max_concurrency=1) as gateway:
        exchange = gateway.request(
            COMPLETIONS,
            {"model": MODEL, "prompt": "hi", "max_tokens": 1000, "stream": True},
            headers={"x-priority": "normal"},
        )
        call = await gateway.engine.calls.get()
        call.stream()
        call.send(chunk("a"))
        await exchange.wait_for(lambda e: b'"a"' in e.body)
        gateway.request(
            COMPLETIONS, {"model": MODEL, "prompt": "hi", "max_tokens": 4}, headers=HIGH
        )
        assert await wait_for(lambda: gateway.metric("gateway_queue_depth") == 1, timeout=10)
        assert not await wait_for(lambda: exchange.task.done(), timeout=1.0)
        assert gateway.metric("gateway_rejections_total", reason="evicted") == 0
        call.end()
        await exchange.done()
