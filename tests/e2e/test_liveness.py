"""An engine is down when it is dead, not when it is busy.

The real engine sits behind a TCP proxy (``tests.support.tcp_proxy``) that
can make its health checks late — each check's answer trickles back for
seconds, far past the point where the last finished check is stale — while
streams through it flow; the gateway must keep routing to it. Then the
proxy refuses connections, as a vanished engine does, and the gateway must
eject it and refuse at once.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.engines import MODEL, Engine
from tests.support.gateways import Gateway, StartGateway
from tests.support.tcp_proxy import TcpProxy
from tests.support.wait import wait_for

# The staleness window is 3 x interval + timeout = 2.5 s; a check held for
# 10 s is stale four times over.
SETTINGS: dict[str, Any] = {"health_interval": 0.5, "health_timeout": 1.0, "admission": "off"}
SLOW_FOR = 10.0
LONG = {"model": MODEL, "prompt": "Tell a long story", "max_tokens": 1200, "ignore_eos": True}
PROBE = {"model": MODEL, "prompt": "hi", "max_tokens": 1}


@pytest.fixture
async def proxy(idle_engine: Engine) -> AsyncIterator[TcpProxy]:
    proxy = TcpProxy(idle_engine.url)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.aclose()


async def test_late_health_checks_under_traffic_eject_nothing_and_refuse_nothing(
    proxy: TcpProxy, start_gateway: StartGateway
) -> None:
    gateway = await _ready_gateway(start_gateway, proxy)
    async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as http:
        slow_done = asyncio.Event()
        users = [asyncio.create_task(_stream_until(http, slow_done, i)) for i in range(2)]
        assert await wait_for(lambda: _in_flight(gateway) >= 2, timeout=120)

        proxy.slow_checks = True
        started = time.monotonic()
        statuses: list[int] = []
        not_ready = 0
        # Until a check has been late for the whole period: new requests
        # and readiness probes keep arriving meanwhile.
        while proxy.slowed == 0 or time.monotonic() - started < SLOW_FOR:
            statuses.append((await http.post("/v1/completions", json=PROBE)).status_code)
            not_ready += (await http.get("/health/ready")).status_code != 200
            await asyncio.sleep(0.2)
        proxy.slow_checks = False
        slow_done.set()
        completed = [finish for user in await asyncio.gather(*users) for finish in user]

    assert proxy.slowed >= 1
    assert set(statuses) == {200}, statuses
    assert not_ready == 0
    assert completed
    assert all(finish == "length" for finish in completed), completed
    assert gateway.metric("gateway_engine_ejections_total") == 0
    assert gateway.metric("gateway_rejections_total", reason="unavailable") == 0


async def test_an_engine_that_refuses_connections_is_ejected_and_requests_refused_at_once(
    proxy: TcpProxy, start_gateway: StartGateway
) -> None:
    gateway = await _ready_gateway(start_gateway, proxy)
    await proxy.refuse()
    assert await wait_for(lambda: gateway.metric("gateway_engine_ejections_total") == 1, 60)
    assert gateway.metric("gateway_upstream_up") == 0
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        answer = await http.post("/v1/completions", json=PROBE)
        ready = await http.get("/health/ready")
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "engine_unavailable"
    assert ready.status_code == 503


async def _ready_gateway(start_gateway: StartGateway, proxy: TcpProxy) -> Gateway:
    """A gateway in front of the proxy, ready (started from a thread: the
    proxy runs on this event loop and must forward its checks meanwhile)."""

    def start() -> Gateway:
        gateway = start_gateway(proxy.url, **SETTINGS)
        gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
        return gateway

    return await asyncio.to_thread(start)


async def _stream_until(http: httpx.AsyncClient, done: asyncio.Event, user: int) -> list[str]:
    """A closed-loop streaming user: stream after stream until ``done``;
    every stream's finish reason."""
    finishes: list[str] = []
    while not done.is_set():
        body = {**LONG, "prompt": f"{LONG['prompt']} {user}.{len(finishes)}", "stream": True}
        async with http.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200, await response.aread()
            finish = ""
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    choice = json.loads(line[6:])["choices"][0]
                    finish = choice.get("finish_reason") or finish
        finishes.append(finish)
    return finishes


def _in_flight(gateway: Gateway) -> float:
    return gateway.metric("gateway_requests_in_flight")
