"""Two gateway replicas in front of the real engine, sharing state on a
primary that Redis Sentinel watches: the primary killed under load, its
replica promoted, the gateways follow and nothing is lost.

What a gateway does in the gap (its share, as with Redis down) and how the
holds a fail-over loses are written back is held open and checked step by
step in tests/state/test_sentinel.py; here the sentinel fails over on its
own, as in production, while streams run."""

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.engines import MODEL, Engine
from tests.support.gateways import Gateway, StartGateway, assert_all_served_once
from tests.support.redis_sentinel import SentinelGroup
from tests.support.wait import wait_for

BODY = {"model": MODEL, "max_tokens": 100, "ignore_eos": True, "stream": True}
WAIT = 120.0


@pytest.fixture
def sentinel_group(tmp_path: Path) -> Iterator[SentinelGroup]:
    started = SentinelGroup(tmp_path)
    try:
        started.start()
        yield started
    finally:
        started.stop()


async def stream(url: str, prompt: str) -> bytes:
    async with (
        httpx.AsyncClient(base_url=url, timeout=300) as http,
        http.stream("POST", "/v1/completions", json={**BODY, "prompt": prompt}) as response,
    ):
        return b"".join([chunk async for chunk in response.aiter_raw()])


def reads(gateway: Gateway, metric: str, value: float) -> Callable[[], bool]:
    return lambda: gateway.metric(metric) == value


async def test_the_primary_killed_under_load_is_followed_to_its_replica_and_nothing_is_lost(
    idle_engine: Engine, start_gateway: StartGateway, sentinel_group: SentinelGroup
) -> None:
    gateways = [
        start_gateway(idle_engine.url, queue_timeout=300, **sentinel_group.settings())
        for _ in range(2)
    ]
    for gateway in gateways:
        gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
        assert await wait_for(reads(gateway, "gateway_shared_state_up", 1), WAIT)

    async def load(label: str, count: int) -> list[bytes]:
        return await asyncio.gather(
            *(stream(gateways[i % 2].url, f"{label} {i}") for i in range(count))
        )

    running = asyncio.create_task(load("before", 12))
    # The primary dies under streams it admitted.
    assert await wait_for(
        lambda: all(g.metric("gateway_requests_in_flight") > 0 for g in gateways), WAIT
    )
    await asyncio.to_thread(sentinel_group.fail_over)
    during = await load("during", 8)
    for gateway in gateways:
        assert await wait_for(reads(gateway, "gateway_shared_state_up", 1), WAIT)
    after = await load("after", 8)
    bodies = [*(await running), *during, *after]
    assert_all_served_once(gateways, bodies)
    for gateway in gateways:
        # Nothing left held, in the gateway or in the promoted primary's
        # count of the fleet (a release the dead primary took, or never
        # got, is set right by the next heartbeat).
        assert await wait_for(reads(gateway, "gateway_kv_tokens_reserved", 0), WAIT)
        assert await wait_for(reads(gateway, "gateway_fleet_kv_tokens_reserved", 0), WAIT)
    assert sum(g.metric("gateway_requests_total", outcome="completed") for g in gateways) == 28
