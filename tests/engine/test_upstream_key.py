"""The engines' own key (``GATEWAY_UPSTREAM_API_KEY``, vLLM's ``--api-key``)
goes with every call to them: completions, health, models and metrics; a
client's ``Authorization`` never goes upstream.

In-process, against a scripted engine that notes the headers of every
request it gets (the real engine's check, which guards /v1/* only, is
tests/e2e/test_upstream_key.py)."""

from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.asgi import in_process_gateway
from tests.support.scripted_engine import DONE, MODEL, ScriptedEngine, chunk

BODY = {"model": MODEL, "prompt": "hello", "max_tokens": 4, "stream": True}
CLIENT = {"authorization": "Bearer sk-the-clients-own"}
# Every path the gateway calls an engine on.
PATHS = {"/health", "/v1/models", "/metrics", "/v1/completions"}


@dataclass
class HeaderNotingEngine(ScriptedEngine):
    """A scripted engine that keeps the path and headers of every request."""

    seen: list[tuple[str, httpx.Headers]] = field(default_factory=list)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.url.path, request.headers))
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
        assert headers.get_list("authorization") == ["Bearer sk-the-engines"], path


async def test_a_clients_authorization_never_goes_upstream() -> None:
    engine = HeaderNotingEngine()
    await served_once(engine)
    assert {path for path, _ in engine.seen} >= PATHS
    for path, headers in engine.seen:
        assert "authorization" not in headers, path
