"""The fair order measured over hundreds of admissions: one gateway, and two
replicas sharing a real Redis, in-process in front of one scripted engine
that runs a few requests at a time. The test serves the engine's calls, so
the order in which the gateways admit is the only thing measured — no
engine speed, no machine load decides it.

Tenant A sends ten times B's requests (440 in all); while both wait,
start-time fair queuing gives each tenant half of the admitted tokens
(their requests are the same size). B's forty admissions make a window of
about eighty: one admission more or less moves the share by about a point,
against a bound of five.
"""

import asyncio
import random
from typing import Any

import pytest

from tests.support.asgi import Exchange, InProcessGateway, in_process_gateway
from tests.support.redis_server import RedisServer
from tests.support.scripted_engine import DONE, MODEL, EngineCall, ScriptedEngine, chunk

SLOTS = 4


def _body(tenant: str, i: int) -> dict[str, object]:
    # Same length for every request: equal tokens, so the share of admitted
    # tokens is the share of admissions.
    return {"model": MODEL, "prompt": f"{tenant} asks {i:04d}", "max_tokens": 32, "stream": True}


def _finish(call: EngineCall) -> None:
    call.stream()
    call.send(chunk("a", finish="length") + DONE)
    call.end()


async def _admission_order(
    replicas: tuple[InProcessGateway, InProcessGateway],
    engine: ScriptedEngine,
    sends: list[tuple[int, str, int]],
) -> list[str]:
    """Send every (replica, tenant, i) at once, then serve the engine's calls,
    ``SLOTS`` at a time, each time ending one of those running, picked by a
    seeded draw (requests do not end in the order they started, so slots
    free up on either replica); the tenants in admission order."""
    draw = random.Random(7)
    exchanges: list[Exchange] = []
    for replica, tenant, i in sends:
        exchanges.append(
            replicas[replica].request(
                "/v1/completions", _body(tenant, i), headers={"X-Tenant-Id": tenant}
            )
        )

    # Everything is queued (or admitted) before the first call is answered,
    # so the order below is the fleet's choice among all the waiters.
    def placed() -> float:
        return sum(r.metric("gateway_queue_depth") for r in replicas) + engine.calls.qsize()

    deadline = asyncio.get_running_loop().time() + 60
    while placed() < len(sends):
        assert asyncio.get_running_loop().time() < deadline, placed()
        await asyncio.sleep(0.01)
    order: list[str] = []
    running: list[EngineCall] = []
    while len(order) < len(sends):
        call = await asyncio.wait_for(engine.calls.get(), timeout=60)
        order.append(str(call.body["prompt"]).split()[0])
        running.append(call)
        if len(running) == SLOTS or len(order) == len(sends):
            _finish(running.pop(draw.randrange(len(running))))
    for call in running:
        _finish(call)
    for exchange in exchanges:
        await exchange.done()
        assert exchange.status == 200
    return order


def _share_while_both_wait(order: list[str]) -> tuple[float, int]:
    """B's share of the admissions up to B's last one (B waits until then,
    and A always has more queued)."""
    last_b = max(i for i, tenant in enumerate(order) if tenant == "B")
    window = order[: last_b + 1]
    return window.count("B") / len(window), len(window)


async def _settled(*gateways: InProcessGateway) -> None:
    """Every hold given back (the gauges are written by each replica's
    dispatcher as it next runs)."""
    deadline = asyncio.get_running_loop().time() + 30
    while not all(g.settled() for g in gateways):
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param("both-over-both", id="both tenants split over both replicas"),
        pytest.param("light-on-one", id="the light tenant on one replica only"),
    ],
)
async def test_a_tenant_with_ten_times_the_load_gets_half_while_both_wait(
    redis: RedisServer, layout: str
) -> None:
    engine = ScriptedEngine(kv_blocks=4096, block_size=16)
    settings: dict[str, Any] = {
        "redis_url": redis.url,
        "max_concurrency": SLOTS,
        "queue_timeout": 600,
        # A busy machine must not make a Redis call late enough to count
        # Redis as down (each replica would then admit on its own share).
        "redis_timeout": 10,
    }
    async with (
        in_process_gateway(engine, **settings) as first,
        in_process_gateway(engine, **settings) as second,
    ):
        heavy = [(i % 2, "A", i) for i in range(400)]
        light = [(i % 2 if layout == "both-over-both" else 1, "B", i) for i in range(40)]
        order = await _admission_order((first, second), engine, heavy + light)
        share, window = _share_while_both_wait(order)
        print(f"\n{layout}: B's share while both waited {share:.1%} of {window} admissions")
        assert 0.45 <= share <= 0.55
        await _settled(first, second)


async def test_one_gateway_gives_a_tenant_with_a_tenth_of_the_load_half() -> None:
    engine = ScriptedEngine(kv_blocks=4096, block_size=16)
    async with in_process_gateway(engine, max_concurrency=SLOTS, queue_timeout=600) as gateway:
        sends = [(0, "A", i) for i in range(400)] + [(0, "B", i) for i in range(40)]
        order = await _admission_order((gateway, gateway), engine, sends)
        share, window = _share_while_both_wait(order)
        print(f"\none gateway: B's share while both waited {share:.1%} of {window} admissions")
        assert 0.45 <= share <= 0.55
        await _settled(gateway)
