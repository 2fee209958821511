"""An engine with two API-server processes (vLLM's ``--api-server-count 2``,
how a busy engine keeps its HTTP side off the engine core's CPU): the gateway
reads its capacity and its load right — the KV cache's size, its running and
waiting counts (from which admission learns its ``--max-num-seqs``) — and
serves its static LoRA adapters (``--lora-modules``: every API server loads
them)."""

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI

from app.engine.stats import EngineStats, parse_engine_stats
from tests.support.engines import (
    ENGINE_KV_BLOCKS,
    ENGINE_MAX_NUM_SEQS,
    LORA,
    MODEL,
    SMALL_ENGINE,
    Engine,
    running_engine,
)
from tests.support.gateways import StartGateway
from tests.support.wait import wait_for

BLOCK = 128


@pytest.fixture(scope="module")
def two_api_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    env = {**SMALL_ENGINE, **LORA, "ENGINE_EXTRA_ARGS": "--api-server-count 2"}
    logs: Path = tmp_path_factory.mktemp("two-api-servers")
    with running_engine("two-api-servers", logs, env) as engine:
        yield engine


async def test_capacity_load_and_adapters_are_read_right_through_two_api_servers(
    two_api_servers: Engine, start_gateway: StartGateway
) -> None:
    engine = two_api_servers
    gateway = start_gateway(engine.url)
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    label = engine.url.removeprefix("http://")
    assert await wait_for(
        lambda: (
            gateway.metric("gateway_kv_tokens_capacity", engine=label) == ENGINE_KV_BLOCKS * BLOCK
        ),
        timeout=60,
    )
    assert gateway.metric("gateway_engine_stats_missing", engine=label) == 0
    async with AsyncOpenAI(
        base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0, timeout=300
    ) as client:
        listed = {m.id: m for m in (await client.models.list()).data}
        assert (listed["sql"].model_extra or {})["parent"] == MODEL
        reply = await client.completions.create(model="sql", prompt="SELECT", max_tokens=4)
        assert reply.model == "sql"
    # More requests than it runs at once (8), each of one KV block: it runs
    # 8 and keeps the rest waiting for room, and its two processes' metrics,
    # read by the gateway's own parser, say exactly that (summed twice, it
    # would say 16).
    body = {"model": MODEL, "prompt": "Wave", "max_tokens": 120, "ignore_eos": True}
    async with httpx.AsyncClient(base_url=engine.url, timeout=300) as http:
        burst = [asyncio.create_task(http.post("/v1/completions", json=body)) for _ in range(24)]
        seen: list[EngineStats] = []

        def at_its_cap() -> bool:
            seen.append(parse_engine_stats(httpx.get(f"{engine.url}/metrics").text))
            stats = seen[-1]
            return stats.running == ENGINE_MAX_NUM_SEQS and stats.waiting_for_capacity > 0

        try:
            assert await wait_for(at_its_cap, timeout=120), seen[-3:]
            assert seen[-1].num_blocks == ENGINE_KV_BLOCKS
            assert seen[-1].waiting == seen[-1].waiting_for_capacity
        finally:
            replies = await asyncio.gather(*burst)
    assert [r.status_code for r in replies] == [200] * 24
