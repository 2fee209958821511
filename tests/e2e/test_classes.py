"""Classes against the real engine (it runs ``--scheduling-policy priority``,
as every engine the project starts): the order reaches the engine's own
queue, and a sheddable request is stopped for a higher class.

The session engine runs 8 sequences on 24 KV blocks: twelve long low
streams keep it full, four of them waiting in the engine's own queue."""

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import httpx

from deploy.local import scrape, value
from tests.support.engines import MODEL, Engine
from tests.support.gateways import StartGateway
from tests.support.wait import wait_for

LOW = {"model": MODEL, "max_tokens": 1500, "ignore_eos": True, "stream": True}
HIGH = {"model": MODEL, "prompt": "urgent", "max_tokens": 8, "ignore_eos": True, "stream": True}


async def first_token_at(http: httpx.AsyncClient, body: dict[str, object], **headers: str) -> float:
    """When the stream's first token arrived (it is read no further)."""
    request = http.build_request("POST", "/v1/completions", json=body, headers=headers)
    response = await http.send(request, stream=True)
    try:
        assert response.status_code == 200
        async for raw in response.aiter_raw():
            if b'"text":"' in raw.replace(b'"text":""', b""):
                return time.perf_counter()
        raise AssertionError("the stream ended without a token")
    finally:
        await response.aclose()


async def hold_low(http: httpx.AsyncClient, i: int, first: "asyncio.Future[float]") -> None:
    """A long low stream, read to its end or until cancelled; ``first`` is
    set to when its first token came."""
    body = {**LOW, "prompt": f"bulk {i}"}
    request = http.build_request(
        "POST", "/v1/completions", json=body, headers={"x-priority": "low"}
    )
    response = await http.send(request, stream=True)
    try:
        async for raw in response.aiter_raw():
            if not first.done() and b'"text":"' in raw.replace(b'"text":""', b""):
                first.set_result(time.perf_counter())
    finally:
        await response.aclose()


@contextlib.asynccontextmanager
async def lows_filling(
    http: httpx.AsyncClient, first: int, count: int
) -> AsyncIterator[list["asyncio.Future[float]"]]:
    """``count`` long low streams held open; each one's first token's time."""
    loop = asyncio.get_running_loop()
    firsts: list[asyncio.Future[float]] = [loop.create_future() for _ in range(count)]
    tasks = [asyncio.create_task(hold_low(http, first + i, f)) for i, f in enumerate(firsts)]
    try:
        yield firsts
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def in_engine(engine: Engine) -> float:
    """Running and waiting, read from one scrape."""
    samples = scrape(engine.url)
    return value(samples, "vllm:num_requests_running") + value(samples, "vllm:num_requests_waiting")


async def high_after_queued_lows(engine: Engine, gateway_url: str) -> tuple[float, list[float]]:
    """The high stream's first token, and those of the new lows still
    waiting in the engine's queue (behind the running ones it preempts) when
    it was sent."""
    async with (
        httpx.AsyncClient(base_url=gateway_url, timeout=120) as http,
        lows_filling(http, 0, 8) as running,
    ):
        assert await wait_for(lambda: all(f.done() for f in running), 60)
        async with lows_filling(http, 8, 4) as queued:
            # All twelve inside the engine (its preempted ones wait there too,
            # so the waiting count alone can pass before the new four arrive).
            assert await wait_for(lambda: in_engine(engine) == 12, 60)
            # The lows still waiting for their first token when the high is sent.
            waiting = [f for f in queued if not f.done()]
            assert len(waiting) >= 2
            high = await first_token_at(http, HIGH, **{"x-priority": "high"})
            done, _ = await asyncio.wait(waiting, timeout=60)
            assert len(done) == len(waiting)
            return high, [f.result() for f in done]


async def test_a_high_request_passes_the_lows_waiting_in_the_engines_queue(
    idle_engine: Engine, start_gateway: StartGateway
) -> None:
    """No queue in the gateway (admission off): what waits, waits in the
    engine. With the class's priority sent, the high stream's first token
    comes before any of the four lows queued there before it."""
    gateway = start_gateway(idle_engine.url, admission="off", engine_scheduling="priority")
    high, lows = await high_after_queued_lows(idle_engine, gateway.url)
    assert all(high < low for low in lows)


async def test_without_the_priority_the_engine_serves_the_high_request_after_them(
    idle_engine: Engine, start_gateway: StartGateway
) -> None:
    """The negative control: the same, but the gateway tells the engine
    nothing (``fcfs``): the high stream waits behind the lows queued first.
    (Those queued last may start in the engine step the high starts in, and
    the client reads one step's first tokens in no set order: only the ones
    that start a step or more before it say which came first.)"""
    gateway = start_gateway(idle_engine.url, admission="off")
    high, lows = await high_after_queued_lows(idle_engine, gateway.url)
    assert lows
    assert any(low < high for low in lows)


async def test_a_low_stream_is_stopped_for_a_high_one_that_would_miss_its_objective(
    idle_engine: Engine, start_gateway: StartGateway
) -> None:
    """The gateway's eight sequences hold long low streams (it takes the
    cache for larger than it is, so none waits in the gateway): a high
    request with a 2 s objective has the newest stopped and starts within
    its objective; the stopped client reads one error event, ``evicted``;
    the eviction is confirmed or counted wasted at the engine's next report."""
    gateway = start_gateway(
        idle_engine.url,
        max_concurrency=8,
        engine_scheduling="priority",
        kv_blocks=400,
    )
    async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as http:
        lows = [
            http.build_request(
                "POST",
                "/v1/completions",
                json={**LOW, "prompt": f"bulk {i}"},
                headers={"x-priority": "low"},
            )
            for i in range(8)
        ]
        streams = [await http.send(request, stream=True) for request in lows]
        try:
            assert await wait_for(lambda: gateway.metric("gateway_requests_in_flight") == 8, 60)
            sent = time.perf_counter()
            high = await first_token_at(
                http, HIGH, **{"x-priority": "high", "x-slo-ttft-ms": "2000"}
            )
            assert high - sent < 2.0
            evicted = []
            for stream in streams:
                body = b""
                with contextlib.suppress(httpx.ReadTimeout, asyncio.TimeoutError):
                    async with asyncio.timeout(0.2):
                        async for raw in stream.aiter_raw():
                            body += raw
                if b'"code":"evicted"' in body:
                    last = body.strip().split(b"\n\n")[-1]
                    error = json.loads(last.removeprefix(b"data: "))["error"]
                    assert error["retry_after"] >= 1
                    evicted.append(stream)
            assert len(evicted) == 1
            assert gateway.metric("gateway_rejections_total", reason="evicted") == 1

            def accounted() -> bool:
                confirmed = gateway.metric("gateway_evictions_total", outcome="confirmed")
                wasted = gateway.metric("gateway_evictions_total", outcome="wasted")
                return confirmed + wasted == 1

            assert await wait_for(accounted, 30)
            # The engine ran no more than the gateway held there, and the
            # high request was admitted in the stopped one's place.
            assert gateway.metric("gateway_evictions_total", outcome="confirmed") == 1
        finally:
            for stream in streams:
                await stream.aclose()
