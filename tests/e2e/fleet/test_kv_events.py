"""Prefix routing on what two real engines report holding (their KV cache
events, vLLM's ``--kv-events-config``): a prompt one engine holds goes there
although its key prefers the other; once that engine evicts it, it returns
to its home (or, placed by key, goes where its key hashes); a gateway that
cannot hear the events ranks by the key and counts the fallback.

The test watches the engine's events itself too (``Watch``), only to know
when the engine has cached or evicted a prompt and when the gateway has
seen as much (its ``gateway_kv_blocks_held`` equals the watcher's count
once the engine is quiet)."""

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from urllib.parse import urlsplit

import httpx
import pytest
import zmq.asyncio

from app.engine.kv_subscriber import KvEventSubscriber
from app.observe.metrics import GatewayMetrics
from app.request.validation import Limits, check_request
from app.routing.base import EngineLoad
from app.routing.block_index import BlockIndex, PromptBlocks
from app.routing.prefix_key import prompt_keys
from tests.support.engines import KV_EVENTS, MODEL, Engine, kv_events_port
from tests.support.gateways import Gateway, StartGateway
from tests.support.routing import PrefixRoute
from tests.support.wait import wait_for

BLOCK = 128
# Three whole blocks and a part: the engine caches three.
PROMPT_TOKENS = 3 * BLOCK + 16


def label(engine: Engine) -> str:
    return engine.url.removeprefix("http://")


def prompt_preferring(engine: Engine, fleet: list[Engine], seed: int) -> list[int]:
    """Token ids of a new prompt whose prefix key prefers ``engine`` (the
    ranking the gateway uses when no engine holds the prompt)."""
    rng = random.Random(seed)
    loads = [EngineLoad(id=e.url, weight=24.0) for e in fleet]
    while True:
        ids = [rng.randrange(10, 1000) for _ in range(PROMPT_TOKENS)]
        body = {"model": MODEL, "prompt": ids}
        job = check_request("completions", body, {MODEL: None}, Limits(4, 4), "1.1")
        key = prompt_keys(job, lambda chars: chars).affinity
        choice = PrefixRoute().choose(key, loads)
        if choice is not None and choice.engine == engine.url:
            return ids


async def complete(url: str, ids: list[int]) -> None:
    body = {"model": MODEL, "prompt": ids, "max_tokens": 1}
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        reply = await http.post("/v1/completions", json=body)
    assert reply.status_code == 200, reply.text


class Watch:
    """The engine's KV cache events as the test sees them."""

    def __init__(self, index: BlockIndex) -> None:
        self.index = index

    def holds(self, ids: list[int]) -> int:
        return self.index.leading(PromptBlocks(tuple(ids)))

    async def gateway_sees_as_much(self, gateway: Gateway, engine: Engine) -> bool:
        """The gateway's count of the engine's blocks settles on the watch's."""

        def same() -> bool:
            held = gateway.metric("gateway_kv_blocks_held", engine=label(engine))
            return self.index.live and held == len(self.index)

        return await wait_for(same, timeout=60)


@asynccontextmanager
async def watching(engine: Engine) -> AsyncIterator[Watch]:
    port = urlsplit(engine.url).port
    assert port is not None
    events = kv_events_port(port)
    index, context = BlockIndex(), zmq.asyncio.Context()
    subscriber = KvEventSubscriber(
        "watch",
        f"tcp://127.0.0.1:{events}",
        f"tcp://127.0.0.1:{events + 1}",
        index,
        GatewayMetrics(),
        context,
    )
    task = asyncio.create_task(subscriber.run())
    try:
        assert await wait_for(lambda: index.live, timeout=60)
        yield Watch(index)
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        context.destroy(linger=0)


def routed(gateway: Gateway, engine: Engine) -> float:
    return gateway.metric("gateway_engine_requests_total", engine=label(engine))


# Where a prompt goes once the engine that held it has evicted it, by
# ``GATEWAY_ROUTING_PLACEMENT``: back to its home, the engine it was first
# sent to (the default), or where its key hashes. Each with a prompt of its
# own (the seed): the other's may still be cached where it ended.
AFTER_EVICTION = [
    pytest.param({}, "home", 5, id="placed-by-load-default"),
    pytest.param({"routing_placement": "key"}, "key", 1, id="placed-by-key"),
]


@pytest.mark.parametrize(("placement", "returns_to", "seed"), AFTER_EVICTION)
async def test_a_prompt_goes_to_the_engine_that_holds_it_until_that_engine_evicts_it(
    idle_engine: Engine,
    second: Engine,
    start_gateway: StartGateway,
    placement: dict[str, str],
    returns_to: str,
    seed: int,
) -> None:
    fleet = [idle_engine, second]
    gateway = start_gateway(
        idle_engine.url,
        upstream_urls=f"{idle_engine.url},{second.url}",
        routing="prefix",
        **placement,
        **KV_EVENTS,
    )
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    assert await wait_for(lambda: gateway.metric("gateway_kv_events_up") == 2, timeout=60)
    # Its key prefers the second engine; the first is made to hold it.
    ids = prompt_preferring(second, fleet, seed=seed)
    async with watching(idle_engine) as watch:
        await complete(idle_engine.url, ids)
        assert await wait_for(lambda: watch.holds(ids) == 3, timeout=60)
        assert await watch.gateway_sees_as_much(gateway, idle_engine)

        await complete(gateway.url, ids)
        assert (routed(gateway, idle_engine), routed(gateway, second)) == (1, 0)
        assert gateway.metric("gateway_routing_affinity_hits_total", engine=label(idle_engine)) == 1

        # Evicted: two prompts of twelve new blocks each take the whole cache.
        for seed in (2, 3):
            rng = random.Random(seed)
            await complete(idle_engine.url, [rng.randrange(10, 1000) for _ in range(12 * BLOCK)])
        assert await wait_for(lambda: watch.holds(ids) == 0, timeout=60)
        assert await watch.gateway_sees_as_much(gateway, idle_engine)

        # No engine holds it now. Its home is the first engine, where its
        # first request went; its key still prefers the second.
        await complete(gateway.url, ids)
        expected = (2, 0) if returns_to == "home" else (1, 1)
        assert (routed(gateway, idle_engine), routed(gateway, second)) == expected
    assert gateway.metric("gateway_routing_kv_fallbacks_total") == 0


def chat(seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    words = ["harbour", "lantern", "tide", "ferry", "market", "gull", "rope", "quay", "salt"]
    document = " ".join(rng.choice(words) for _ in range(700))
    return [{"role": "system", "content": document}, {"role": "user", "content": "Summarise."}]


async def chat_ids(engine: Engine, messages: list[dict[str, str]]) -> list[int]:
    """The chat's token ids as the engine renders and tokenizes it."""
    body = {"model": MODEL, "messages": messages, "add_generation_prompt": True}
    async with httpx.AsyncClient(base_url=engine.url, timeout=120) as http:
        reply = await http.post("/tokenize", json=body)
    assert reply.status_code == 200, reply.text
    tokens: list[int] = reply.json()["tokens"]
    return tokens


async def test_a_chat_the_gateway_counted_goes_to_the_engine_that_holds_it(
    idle_engine: Engine, second: Engine, start_gateway: StartGateway
) -> None:
    """A chat prompt's token ids, as the gateway counts them (the engine's
    /tokenize), are the ids the engine caches: the chat goes where it is
    held, though its key prefers the other engine."""
    fleet = [idle_engine, second]
    gateway = start_gateway(
        idle_engine.url,
        upstream_urls=f"{idle_engine.url},{second.url}",
        routing="prefix",
        **KV_EVENTS,
    )
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    assert await wait_for(lambda: gateway.metric("gateway_kv_events_up") == 2, timeout=60)
    loads = [EngineLoad(id=e.url, weight=24.0) for e in fleet]
    for seed in range(100, 200):
        messages = chat(seed)
        ids = await chat_ids(idle_engine, messages)
        as_ids = {"model": MODEL, "prompt": ids}
        job = check_request("completions", as_ids, {MODEL: None}, Limits(4, 4), "1.1")
        key = prompt_keys(job, lambda chars: chars).affinity
        preferred = PrefixRoute().choose(key, loads)
        if preferred is not None and preferred.engine == second.url:
            break
    assert len(ids) > 3 * BLOCK
    body = {"model": MODEL, "messages": messages, "max_tokens": 1}
    async with watching(idle_engine) as watch, httpx.AsyncClient(timeout=120) as http:
        reply = await http.post(f"{idle_engine.url}/v1/chat/completions", json=body)
        assert reply.status_code == 200, reply.text
        assert await wait_for(lambda: watch.holds(ids) == len(ids) // BLOCK, timeout=60)
        assert await watch.gateway_sees_as_much(gateway, idle_engine)
        reply = await http.post(f"{gateway.url}/v1/chat/completions", json=body)
        assert reply.status_code == 200, reply.text
    assert (routed(gateway, idle_engine), routed(gateway, second)) == (1, 0)
    assert gateway.metric("gateway_prompts_counted_total", source="engine") == 1
    assert gateway.metric("gateway_routing_kv_fallbacks_total") == 0


async def test_a_gateway_that_cannot_hear_the_events_ranks_by_the_key_and_says_so(
    idle_engine: Engine, second: Engine, start_gateway: StartGateway
) -> None:
    """Events on the wrong port: never live. A prompt the first engine holds
    goes where its key says, and every such request is a counted fallback;
    so is a text prompt whose token ids are not known (prompts estimated,
    not counted)."""
    fleet = [idle_engine, second]
    gateway = start_gateway(
        idle_engine.url,
        upstream_urls=f"{idle_engine.url},{second.url}",
        routing="prefix",
        kv_events_endpoint="tcp://{host}:{port+9}",
        kv_events_replay_endpoint="tcp://{host}:{port+10}",
        prompt_tokens="estimate",
    )
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    ids = prompt_preferring(second, fleet, seed=4)
    await complete(idle_engine.url, ids)
    await complete(gateway.url, ids)
    assert (routed(gateway, idle_engine), routed(gateway, second)) == (0, 1)
    assert gateway.metric("gateway_kv_events_up") == 0
    assert gateway.metric("gateway_routing_kv_fallbacks_total", reason="events") == 1
    body = {"model": MODEL, "prompt": "A text prompt", "max_tokens": 1}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as http:
        assert (await http.post("/v1/completions", json=body)).status_code == 200
    assert gateway.metric("gateway_routing_kv_fallbacks_total", reason="token_ids") == 1
