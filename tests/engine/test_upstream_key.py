"""The engines' own key (``GATEWAY_UPSTREAM_API_KEY``, vLLM's ``--api-key``)
goes with every call to them: completions, health, models and metrics; a
client's ``Authorization`` never goes upstream.

In-process, against a scripted engine that notes the headers of every
request it gets (the real engine's check, which guards /v1/* only, is
tests/e2e/test_upstream_key.py)."""

import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from multidict import CIMultiDictProxy

from tests.support.asgi import in_process_gateway
from tests.support.scripted_engine import DONE, MODEL, ScriptedEngine, chunk
from tests.support.wait import wait_for

BODY = {"model": MODEL, "prompt": "hello", "max_tokens": 4, "stream": True}
CLIENT = {"authorization": "Bearer sk-the-clients-own"}
# Every path the gateway calls an engine on.
PATHS = {"/health", "/v1/models", "/metrics", "/v1/completions"}


@dataclass
class HeaderNotingEngine(ScriptedEngine):
    """A scripted engine that keeps the path and headers of every request."""

    seen: list[tuple[str, CIMultiDictProxy[str]]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.path, request.headers))
        return await super().handle(request)


async def served_once(engine: HeaderNotingEngine, **settings: Any) -> None:
    """One streamed completion through a gateway in front of ``engine``,
    the client presenting a key of its own."""
    async with in_process_gateway(engine, **settings) as gateway:
        exchange = gateway.request("/v1/completions", BODY, headers=CLIENT)
        call = await engine.calls.get()
        call.stream()
        call.send(chunk("a", finish="length") + DONE)
        call.end()
        await exchange.done()
        assert exchange.status == 200, exchange.body


async def test_the_upstream_key_goes_with_every_call_to_the_engine() -> None:
    engine = HeaderNotingEngine()
    await served_once(engine, upstream_api_key="sk-the-engines")
    assert {path for path, _ in engine.seen} >= PATHS
    for path, headers in engine.seen:
        assert headers.getall("authorization") == ["Bearer sk-the-engines"], path


async def test_a_clients_authorization_never_goes_upstream() -> None:
    engine = HeaderNotingEngine()
    await served_once(engine)
    assert {path for path, _ in engine.seen} >= PATHS
    for path, headers in engine.seen:
        assert "authorization" not in headers, path


@dataclass
class KeyedEngine(HeaderNotingEngine):
    """What vLLM started with --api-key answers a caller without its key:
    /health and /metrics as ever, 401 on /v1/*."""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/v1/"):
            self.seen.append((request.path, request.headers))
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await super().handle(request)


async def test_an_engine_refusing_the_gateways_key_is_named_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = KeyedEngine()
    with caplog.at_level(logging.WARNING, logger="gateway.engine"):
        async with in_process_gateway(engine, health_interval=0.01):

            def models_asked(times: int) -> bool:
                return sum(path == "/v1/models" for path, _ in engine.seen) >= times

            assert await wait_for(lambda: models_asked(5), timeout=60)
    told = [r.getMessage() for r in caplog.records if "answers 401" in r.getMessage()]
    assert len(told) == 1, told
    assert "GATEWAY_UPSTREAM_API_KEY" in told[0]
