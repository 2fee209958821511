"""Streams through two gateway replicas while the Redis under their shared
state fails over (Sentinel's primary, a cluster's primary): what runs when
it dies, what comes during the promotion and after, all served once and
nothing left held."""

import asyncio
from collections.abc import Callable

import httpx

from tests.support.engines import MODEL
from tests.support.gateways import Gateway, assert_all_served_once
from tests.support.wait import wait_for

BODY = {"model": MODEL, "max_tokens": 100, "ignore_eos": True, "stream": True}
WAIT = 120.0


async def stream(url: str, prompt: str) -> bytes:
    async with (
        httpx.AsyncClient(base_url=url, timeout=300) as http,
        http.stream("POST", "/v1/completions", json={**BODY, "prompt": prompt}) as response,
    ):
        return b"".join([chunk async for chunk in response.aiter_raw()])


def reads(gateway: Gateway, metric: str, value: float) -> Callable[[], bool]:
    return lambda: gateway.metric(metric) == value


async def shared_state_up(gateways: list[Gateway]) -> None:
    for gateway in gateways:
        gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
        assert await wait_for(reads(gateway, "gateway_shared_state_up", 1), WAIT)


async def load_through_a_fail_over(gateways: list[Gateway], fail_over: Callable[[], None]) -> None:
    """12 streams running when ``fail_over`` kills a primary (and returns
    once its replica took its place), 8 more during it, 8 after the gateways
    are back on shared state: all 28 served to the end, once, and nothing
    held in the gateways nor in Redis's count of the fleet (a release lost
    with the dead primary is set right by the next heartbeat)."""

    async def load(label: str, count: int) -> list[bytes]:
        return await asyncio.gather(
            *(stream(gateways[i % 2].url, f"{label} {i}") for i in range(count))
        )

    running = asyncio.create_task(load("before", 12))
    assert await wait_for(
        lambda: all(g.metric("gateway_requests_in_flight") > 0 for g in gateways), WAIT
    )
    during = asyncio.create_task(load("during", 8))
    await asyncio.to_thread(fail_over)
    during_bodies = await during
    for gateway in gateways:
        assert await wait_for(reads(gateway, "gateway_shared_state_up", 1), WAIT)
    after = await load("after", 8)
    bodies = [*(await running), *during_bodies, *after]
    assert_all_served_once(gateways, bodies)
    for gateway in gateways:
        assert await wait_for(reads(gateway, "gateway_kv_tokens_reserved", 0), WAIT)
        assert await wait_for(reads(gateway, "gateway_fleet_kv_tokens_reserved", 0), WAIT)
    assert sum(g.metric("gateway_requests_total", outcome="completed") for g in gateways) == 28
