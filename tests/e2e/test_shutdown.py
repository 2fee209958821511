"""Graceful shutdown: SIGTERM drains in-flight streams before the gateway exits."""

import asyncio
import json
import signal

import httpx

from tests.support.engines import MODEL, Engine, engine_idle
from tests.support.gateways import Gateway, StartGateway
from tests.support.streams import open_stream
from tests.support.wait import wait_until

LONG = {"model": MODEL, "prompt": "The city built a bridge", "ignore_eos": True}


def draining_gateway(engine: Engine, start: StartGateway, grace: float, timeout: float) -> Gateway:
    gateway = start(
        engine.url, admission="off", drain_grace_seconds=grace, shutdown_timeout=timeout
    )
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=30)
    return gateway


async def sigterm_after_first_token(
    response: httpx.Response, gateway: Gateway, signalled: asyncio.Event | None = None
) -> bytes:
    """Read the stream to its first token, send the gateway SIGTERM, then
    read the rest; returns everything received."""
    chunks = response.aiter_raw()
    received = b""
    async for raw in chunks:
        received += raw
        if b'"text"' in received:
            break
    gateway.process.signal(signal.SIGTERM)
    if signalled is not None:
        signalled.set()
    async for raw in chunks:
        received += raw
    return received


async def test_sigterm_lets_a_running_stream_finish(
    idle_engine: Engine, start_gateway: StartGateway
) -> None:
    # A grace long enough for the stream to finish on a busy machine.
    gateway = draining_gateway(idle_engine, start_gateway, grace=120, timeout=150)

    async def meanwhile() -> tuple[httpx.Response, httpx.Response]:
        """While draining: not ready, and new requests are turned away."""
        async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as other:
            for _ in range(100):
                if (await other.get("/health/ready")).status_code == 503:
                    break
                await asyncio.sleep(0.05)
            ready = await other.get("/health/ready")
            refused = await other.post(
                "/v1/completions", json={"model": MODEL, "prompt": "late", "max_tokens": 2}
            )
            return ready, refused

    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=60) as http,
        open_stream(http, {**LONG, "max_tokens": 300}) as response,
    ):
        signalled = asyncio.Event()
        stream = asyncio.create_task(sigterm_after_first_token(response, gateway, signalled))
        await signalled.wait()
        ready, refused = await meanwhile()
        received = await stream
    assert ready.status_code == 503
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "draining"
    assert int(refused.headers["retry-after"]) >= 1
    assert received.endswith(b"data: [DONE]\n\n")
    assert b'"error"' not in received
    assert await asyncio.to_thread(gateway.process.proc.wait, 180) == 0


async def test_streams_still_open_after_the_grace_period_end_with_an_error_event(
    idle_engine: Engine, start_gateway: StartGateway
) -> None:
    gateway = draining_gateway(idle_engine, start_gateway, grace=0.5, timeout=10)
    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=60) as http,
        open_stream(http, {**LONG, "max_tokens": 2000}) as response,
    ):
        received = await sigterm_after_first_token(response, gateway)
    last = [event for event in received.split(b"\n\n") if event][-1]
    assert json.loads(last[6:])["error"]["code"] == "draining"
    assert b"[DONE]" not in received
    assert await asyncio.to_thread(gateway.process.proc.wait, 30) == 0
    # The engine was told to stop too.
    assert wait_until(lambda: engine_idle(idle_engine.metric), timeout=10)


async def test_a_non_streaming_call_still_running_after_the_grace_period_gets_503(
    idle_engine: Engine, start_gateway: StartGateway
) -> None:
    gateway = draining_gateway(idle_engine, start_gateway, grace=0.5, timeout=10)
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        call = asyncio.create_task(http.post("/v1/completions", json={**LONG, "max_tokens": 2000}))
        assert await asyncio.to_thread(
            wait_until, lambda: idle_engine.metric("vllm:num_requests_running") == 1, 10
        )
        gateway.process.signal(signal.SIGTERM)
        response = await call
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "draining"
    assert await asyncio.to_thread(gateway.process.proc.wait, 30) == 0
    assert wait_until(lambda: engine_idle(idle_engine.metric), timeout=10)
