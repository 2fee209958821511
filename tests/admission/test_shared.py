"""Two gateway replicas, in-process, sharing state through a real Redis in
front of one scripted engine: one budget for the engine, not one each."""

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.asgi import in_process_gateway
from tests.support.redis_server import RedisServer
from tests.support.scripted_engine import DONE, MODEL, ScriptedEngine, chunk

BODY = {"model": MODEL, "prompt": "hello", "max_tokens": 100, "stream": True}


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    server = RedisServer(tmp_path)
    server.start()
    yield server.url
    server.stop()


async def test_a_burst_split_over_two_replicas_stays_within_one_budget(redis_url: str) -> None:
    # 24 blocks of 16 tokens; each request asks for 7 blocks: 3 fit.
    engine = ScriptedEngine(kv_blocks=24, block_size=16)
    async with (
        in_process_gateway(engine, redis_url=redis_url, queue_timeout=60) as first,
        in_process_gateway(engine, redis_url=redis_url, queue_timeout=60) as second,
    ):
        exchanges = [
            gw.request("/v1/completions", BODY) for gw in (first, second) for _ in range(6)
        ]
        calls = [await engine.calls.get() for _ in range(3)]
        await asyncio.sleep(0.3)  # a fourth would have arrived by now if admitted
        assert engine.calls.empty()
        assert first.metric("gateway_queue_depth") + second.metric("gateway_queue_depth") == 9
        fleet = first.metric("gateway_fleet_kv_tokens_reserved")
        assert fleet == 3 * 7 * 16
        for call in calls:
            call.stream()
            call.send(chunk("a") + DONE)
            call.end()
        # As holds end, the queued ones are admitted, three at a time.
        served = 3
        while served < 12:
            batch = [await engine.calls.get()]
            while not engine.calls.empty():
                batch.append(engine.calls.get_nowait())
            assert len(batch) <= 3
            for call in batch:
                call.stream()
                call.send(chunk("a") + DONE)
                call.end()
            served += len(batch)
        for exchange in exchanges:
            await exchange.done()
        assert first.settled()
        assert second.settled()
