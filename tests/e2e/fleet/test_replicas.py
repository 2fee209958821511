"""Two gateway replicas in front of the real engine, sharing state through a
real redis-server: one KV budget, one fair order, one set of limits; a
replica killed without a drain stops counting; Redis stopping loses nothing.
The fair order and a replica's death, where a Redis Cluster runs them in
steps over several slots, also on the session's cluster."""

import asyncio
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from tests.support.engines import MODEL, Engine, engine_idle
from tests.support.fairness import heavy_admitted_before_light_finished
from tests.support.gateways import Gateway, StartGateway, access_log, assert_all_served_once
from tests.support.keys import key_entry, write_keys_file
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.redis_server import RedisServer
from tests.support.wait import wait_until

RedisStore = RedisServer | RedisClusterNodes
LONG = {"model": MODEL, "max_tokens": 600, "ignore_eos": True, "stream": True}


def pair(start: StartGateway, engine: Engine, **settings: object) -> tuple[Gateway, Gateway]:
    gateways = (start(engine.url, **settings), start(engine.url, **settings))
    for gateway in gateways:
        gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    return gateways


async def stream(url: str, body: dict[str, object], **headers: str) -> bytes:
    async with (
        httpx.AsyncClient(base_url=url, timeout=300) as http,
        http.stream("POST", "/v1/completions", json=body, headers=headers) as response,
    ):
        return b"".join([chunk async for chunk in response.aiter_raw()])


async def burst(gateways: tuple[Gateway, Gateway], count: int) -> list[bytes]:
    return await asyncio.gather(
        *(stream(gateways[i % 2].url, {**LONG, "prompt": f"Burst {i}"}) for i in range(count))
    )


def preemptions(engine: Engine) -> float:
    return engine.metric("vllm:num_preemptions_total")


def until(check: Callable[[], bool], timeout: float = 60) -> Awaitable[bool]:
    return asyncio.to_thread(wait_until, check, timeout)


async def test_a_burst_split_over_two_replicas_fits_one_budget_only_when_shared(
    idle_engine: Engine, start_gateway: StartGateway, redis: RedisServer
) -> None:
    """Eight streams of 600 tokens, four through each replica: each needs 5
    of the engine's 24 KV blocks. Alone, each replica admits four (20 of
    its 24): eight run and preempt each other. Shared, four run at a time.
    (Overcommit is held at 1 here: adaptive overcommit probes past the
    budget on purpose, on one replica as on two.)"""
    alone = pair(start_gateway, idle_engine, overcommit_max=1)
    before = preemptions(idle_engine)
    bodies = await burst(alone, 8)
    assert all(b.endswith(b"data: [DONE]\n\n") for b in bodies)
    unshared = preemptions(idle_engine) - before
    for gateway in alone:
        gateway.process.stop()
    assert wait_until(lambda: engine_idle(idle_engine.metric), timeout=60)

    with_redis = await shared_burst(start_gateway, idle_engine, redis.settings())
    print(f"\npreemptions: two replicas alone {unshared:.0f}, sharing Redis {with_redis:.0f}")
    assert unshared > 0
    assert with_redis == 0


async def test_the_same_burst_fits_one_budget_shared_on_a_cluster(
    idle_engine: Engine, start_gateway: StartGateway, redis_cluster: RedisClusterNodes
) -> None:
    """The shared half of the burst above, each hold in two steps over the
    cluster's slots (the half alone preempts, above, as on one Redis)."""
    redis_cluster.flush()
    assert await shared_burst(start_gateway, idle_engine, redis_cluster.settings()) == 0


async def shared_burst(start: StartGateway, engine: Engine, store: dict[str, object]) -> float:
    """The preemptions of eight 600-token streams through two replicas
    sharing ``store``."""
    shared = pair(start, engine, **store, queue_timeout=300, overcommit_max=1)
    before = preemptions(engine)
    bodies = await burst(shared, 8)
    assert all(b.endswith(b"data: [DONE]\n\n") for b in bodies)
    return preemptions(engine) - before


async def test_a_tenant_with_ten_times_the_load_over_both_replicas_does_not_starve_another(
    idle_engine: Engine, start_gateway: StartGateway, redis_store: RedisStore
) -> None:
    gateways = pair(
        start_gateway, idle_engine, **redis_store.settings(), max_concurrency=2, queue_timeout=300
    )

    async def one(tenant: str, i: int) -> None:
        body = {"model": MODEL, "prompt": f"{tenant} asks {i}", "max_tokens": 32}
        async with httpx.AsyncClient(base_url=gateways[i % 2].url, timeout=300) as http:
            reply = await http.post(
                "/v1/completions",
                json={**body, "ignore_eos": True},
                headers={"X-Tenant-Id": tenant, "X-Request-Id": f"fair-{tenant}-{i}"},
            )
        assert reply.status_code == 200

    # Enough of B's requests that one admission more or less for A while
    # both wait does not decide the share.
    await asyncio.gather(*(one("A", i) for i in range(60)), *(one("B", i) for i in range(6)))
    entries = [
        e for g in gateways for e in access_log(g) if str(e["request_id"]).startswith("fair-")
    ]
    assert len(entries) == 66
    before, heavy = heavy_admitted_before_light_finished(entries, light="B")
    print(f"\nA's requests admitted before B's last, over two replicas: {before} of {heavy}")
    # Fair over the fleet: B's six alternate with A's from when they arrive;
    # in arrival order they would follow all 60.
    assert before <= heavy / 2


async def test_a_keys_tokens_stay_within_its_limit_across_both_replicas(
    idle_engine: Engine, start_gateway: StartGateway, redis: RedisServer, tmp_path: Path
) -> None:
    limit, window = 2000, 10
    keys = write_keys_file(
        tmp_path / "keys.yaml", [key_entry("shared", "t", "k", tokens_per_minute=limit)]
    )
    gateways = pair(
        start_gateway,
        idle_engine,
        redis_url=redis.url,
        keys_file=keys,
        rate_limit_window=window,
        admission="off",
    )

    async def user(url: str, until: float) -> None:
        loop = asyncio.get_running_loop()
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            i = 0
            while loop.time() < until:
                i += 1
                body = {"model": MODEL, "prompt": f"q{i}", "max_tokens": 150, "stream": True}
                async with http.stream(
                    "POST", "/v1/completions", json=body, headers={"authorization": "Bearer k"}
                ) as response:
                    await response.aread()
                    if response.status_code == 429:
                        await asyncio.sleep(float(response.headers["retry-after"]))

    until = asyncio.get_running_loop().time() + 2.5 * window
    await asyncio.gather(*(user(gateways[i % 2].url, until) for i in range(4)))
    charges = [
        (e["charged_ts"], e["used_tokens"], e["worst_tokens"])
        for g in gateways
        for e in access_log(g)
        if e.get("charged_ts") is not None
    ]
    largest = max(w for _, _, w in charges)
    worst = max(
        sum(used for at, used, _ in charges if start <= at < start + window - 0.05)
        for start, _, _ in charges
    )
    print(f"\nmost tokens in a {window}s window over two replicas: {worst} (limit {limit})")
    assert worst <= limit + largest


async def test_a_replica_killed_without_a_drain_stops_counting_within_its_lease(
    idle_engine: Engine, start_gateway: StartGateway, redis_store: RedisStore
) -> None:
    doomed, survivor = pair(
        start_gateway, idle_engine, **redis_store.settings(), redis_lease_seconds=2
    )
    body = {**LONG, "max_tokens": 1500}
    held = [
        asyncio.create_task(stream(doomed.url, {**body, "prompt": f"Doomed {i}"})) for i in range(2)
    ]
    assert await asyncio.to_thread(
        wait_until, lambda: survivor.metric("gateway_fleet_kv_tokens_reserved") > 0, 60
    )
    doomed.process.signal(signal.SIGKILL)
    for task in held:
        with pytest.raises(httpx.HTTPError):
            await task

    def only_the_survivors() -> bool:
        return survivor.metric("gateway_fleet_kv_tokens_reserved") == survivor.metric(
            "gateway_kv_tokens_reserved"
        )

    assert await until(only_the_survivors)
    assert wait_until(lambda: engine_idle(idle_engine.metric), timeout=60)


async def test_redis_stopping_and_coming_back_loses_nothing(
    idle_engine: Engine, start_gateway: StartGateway, redis: RedisServer
) -> None:
    gateways = pair(start_gateway, idle_engine, redis_url=redis.url, queue_timeout=300)
    body = {"model": MODEL, "max_tokens": 100, "ignore_eos": True, "stream": True}

    async def load(label: str, count: int) -> list[bytes]:
        return await asyncio.gather(
            *(stream(gateways[i % 2].url, {**body, "prompt": f"{label} {i}"}) for i in range(count))
        )

    running = asyncio.create_task(load("before", 12))
    # Redis goes away under streams that were admitted through it.
    assert await until(lambda: any(g.metric("gateway_requests_in_flight") > 0 for g in gateways))
    await asyncio.to_thread(redis.stop)
    for gateway in gateways:
        assert await until(shared_state(gateway, 0))
    during = await load("during", 8)
    await asyncio.to_thread(redis.start)
    for gateway in gateways:
        assert await until(shared_state(gateway, 1))
    after = await load("after", 8)
    bodies = [*(await running), *during, *after]
    assert_all_served_once(gateways, bodies)
    for gateway in gateways:
        assert await until(reserved_nothing(gateway))
    assert sum(g.metric("gateway_requests_total", outcome="completed") for g in gateways) == 28


def shared_state(gateway: Gateway, up: int) -> Callable[[], bool]:
    return lambda: gateway.metric("gateway_shared_state_up") == up


def reserved_nothing(gateway: Gateway) -> Callable[[], bool]:
    return lambda: gateway.metric("gateway_kv_tokens_reserved") == 0
