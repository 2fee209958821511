"""Series that say only what is true: none for shared state a gateway does
not have, none left for an engine that is gone."""

import asyncio
import re

import pytest

from app import __version__
from app.observe.metrics import GatewayMetrics
from tests.support.asgi import InProcessGateway, in_process_gateway
from tests.support.scripted_engine import MODEL, ScriptedEngine
from tests.support.wait import wait_for

BODY = {"model": MODEL, "prompt": "hello", "max_tokens": 8}
ANSWER = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}


async def _scrape(gateway: InProcessGateway) -> str:
    return (await gateway.request("/metrics", b"", method="GET").done()).body.decode()


async def test_a_gateway_without_shared_state_has_no_shared_state_series() -> None:
    async with in_process_gateway() as gateway:
        assert "gateway_shared_state_up" not in await _scrape(gateway)
    # A replica with Redis has it (from its start, 0 until Redis answers).
    metrics = GatewayMetrics()
    metrics.track_shared_state().set(0)
    text = "\n".join(f"{s.name} {s.value}" for m in metrics.registry.collect() for s in m.samples)
    assert "gateway_shared_state_up 0.0" in text


async def test_an_engine_no_longer_discovered_leaves_no_series_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = ScriptedEngine(), ScriptedEngine()
    discovered = [a, b]

    async def resolve(url: str) -> list[str]:
        return [engine.url for engine in discovered]

    monkeypatch.setattr("app.engine.pool.resolve", resolve)
    async with in_process_gateway(
        fleet=(a, b), upstream_urls="dns+http://engines:8000", upstream_dns_interval=0.05
    ) as gateway:
        # Two at once, one on each engine: the routed and in-flight series too.
        exchanges = [gateway.request("/v1/completions", BODY) for _ in range(2)]
        calls = [await asyncio.wait_for(e.calls.get(), timeout=30) for e in (a, b)]
        for call in calls:
            call.answer(200, ANSWER)
        assert [(await e.done()).status for e in exchanges] == [200, 200]
        before = await _scrape(gateway)
        assert f'engine="{b.label}"' in before
        of_a = re.compile(rf'^(\w+)\{{engine="{re.escape(a.label)}"\}}', re.M)
        per_engine = set(of_a.findall(before))
        assert len(per_engine) >= 8, per_engine

        discovered.remove(b)  # the engine's pod is gone
        pool = gateway.services.engines
        assert await wait_for(lambda: b.url not in pool.monitors, timeout=30)
        after = await _scrape(gateway)
        assert f'engine="{b.label}"' not in after
        assert set(of_a.findall(after)) == per_engine


async def test_the_build_info_names_the_version() -> None:
    async with in_process_gateway() as gateway:
        text = await _scrape(gateway)
    (line,) = [line for line in text.splitlines() if line.startswith("gateway_build_info{")]
    assert f'version="{__version__}"' in line
    assert line.endswith(" 1.0")
