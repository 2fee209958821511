"""Bursts of full-length answers against engines of different sizes, through
one gateway and through two replicas sharing Redis: every request is served
and no engine preempts. A burst of answers that all use their whole
``max_tokens`` reaches every request's peak together, so any budget past the
engines' caches (a probe of the overcommit on any engine or replica, a
prompt counted short) shows here as preemptions.

The engines: the session's (24 blocks) and one of 48 blocks started for this
module, both of 128-token blocks. Each request, a prompt of about 20 tokens
and 256 output tokens, needs 3 blocks: 15 fit the larger engine at once, 7
the smaller (each keeps one block for itself)."""

import asyncio
import time
from collections.abc import Iterator

import pytest
from openai import AsyncOpenAI

from tests.support.engines import MODEL, Engine, engine_idle, running_engine
from tests.support.gateways import Gateway, StartGateway
from tests.support.redis_server import RedisServer
from tests.support.wait import wait_until

BURST = 96
MAX_TOKENS = 256
# Long enough for the whole burst to be served on a busy machine: what is
# measured is preemption, not the deadline; and no preemption allowed (the
# budget at 0: what an operator whose recompute is dear sets).
PATIENT = {"queue_timeout": 900, "preemption_budget": 0}


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    env = {"ENGINE_KV_BLOCKS": "48", "ENGINE_MAX_NUM_SEQS": "64", "ENGINE_MODEL_NAME": MODEL}
    with running_engine("large-engine", tmp_path_factory.mktemp("large"), env) as engine:
        yield engine


def preemptions(*engines: Engine) -> float:
    return sum(e.metric("vllm:num_preemptions_total") for e in engines)


def ready(*gateways: Gateway, engines: int = 1) -> None:
    for gateway in gateways:
        gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)

        def all_up(g: Gateway = gateway) -> bool:
            return g.metric("gateway_upstream_up") == engines

        assert wait_until(all_up, 60)


async def one(url: str, i: int) -> tuple[str | None, int]:
    """One streamed chat of the burst: its finish reason and completion tokens."""
    async with AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=900) as api:
        stream = await api.chat.completions.create(
            model=MODEL,
            messages=[
                {
                    "role": "user",
                    "content": f"Request {i}: tell a long story about paged memory {time.time()}",
                }
            ],
            max_tokens=MAX_TOKENS,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        finish, tokens = None, 0
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
        return finish, tokens


async def burst(*gateways: Gateway) -> None:
    """``BURST`` requests at once, spread over ``gateways``: every one served whole."""
    answers = await asyncio.gather(*(one(gateways[i % len(gateways)].url, i) for i in range(BURST)))
    assert answers == [("length", MAX_TOKENS)] * BURST


async def test_a_burst_over_two_engines_of_different_sizes_preempts_neither(
    large: Engine, idle_engine: Engine, start_gateway: StartGateway
) -> None:
    gateway = start_gateway(large.url, upstream_urls=f"{large.url},{idle_engine.url}", **PATIENT)
    ready(gateway, engines=2)
    before = preemptions(large, idle_engine)
    await burst(gateway)
    preempted = preemptions(large, idle_engine) - before
    routed = [
        gateway.metric("gateway_engine_requests_total", engine=engine.url[7:])
        for engine in (large, idle_engine)
    ]
    print(f"\nrouted to the 48- and 24-block engines: {routed}; preemptions {preempted:.0f}")
    assert preempted == 0
    assert routed[0] > routed[1] > 0


async def test_a_burst_through_two_replicas_sharing_redis_preempts_nothing(
    large: Engine, start_gateway: StartGateway, redis: RedisServer
) -> None:
    assert wait_until(lambda: engine_idle(large.metric), timeout=120)
    replicas = [start_gateway(large.url, redis_url=redis.url, **PATIENT) for _ in range(2)]
    ready(*replicas)
    before = preemptions(large)
    await burst(*replicas)
    preempted = preemptions(large) - before
    print(f"\npreemptions with the burst split over two replicas: {preempted:.0f}")
    assert preempted == 0
