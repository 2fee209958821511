"""Two gateway replicas in front of the real engine, sharing state on a Redis
Cluster: the primary that holds the fair order (every admission's first
step) killed under load, its replica promoted, the gateways follow and
nothing is lost.

The cluster's other behaviours (the holds in two steps, the charge undone,
the keys' limits on their slots) are checked on the session's cluster in
tests/state/test_redis.py; this one kills a node, so it has a cluster of its
own."""

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.state import layout
from tests.support.engines import MODEL, Engine
from tests.support.gateways import Gateway, StartGateway, assert_all_served_once
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.wait import wait_for

BODY = {"model": MODEL, "max_tokens": 100, "ignore_eos": True, "stream": True}
WAIT = 120.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisClusterNodes]:
    started = RedisClusterNodes(tmp_path)
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


async def test_the_fair_orders_primary_killed_under_load_is_followed_and_nothing_is_lost(
    idle_engine: Engine, start_gateway: StartGateway, cluster: RedisClusterNodes
) -> None:
    gateways = [
        start_gateway(idle_engine.url, queue_timeout=300, **cluster.settings()) for _ in range(2)
    ]
    for gateway in gateways:
        gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
        assert await wait_for(reads(gateway, "gateway_shared_state_up", 1), WAIT)

    async def load(label: str, count: int) -> list[bytes]:
        return await asyncio.gather(
            *(stream(gateways[i % 2].url, f"{label} {i}") for i in range(count))
        )

    running = asyncio.create_task(load("before", 12))
    # The fair order's primary dies under streams admitted through it.
    assert await wait_for(
        lambda: all(g.metric("gateway_requests_in_flight") > 0 for g in gateways), WAIT
    )
    doomed = await asyncio.to_thread(cluster.primary_of, layout.fleet())
    await asyncio.to_thread(cluster.kill, doomed)
    during = await load("during", 8)
    await asyncio.to_thread(cluster.wait_promoted)
    for gateway in gateways:
        assert await wait_for(reads(gateway, "gateway_shared_state_up", 1), WAIT)
    after = await load("after", 8)
    bodies = [*(await running), *during, *after]
    assert_all_served_once(gateways, bodies)
    for gateway in gateways:
        # Nothing left held, in the gateway or in the cluster's count of the
        # fleet (a release lost with the dead primary is set right by the
        # next heartbeat).
        assert await wait_for(reads(gateway, "gateway_kv_tokens_reserved", 0), WAIT)
        assert await wait_for(reads(gateway, "gateway_fleet_kv_tokens_reserved", 0), WAIT)
    assert sum(g.metric("gateway_requests_total", outcome="completed") for g in gateways) == 28
