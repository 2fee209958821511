"""Two real vLLM engines behind one gateway: a burst larger than one
engine's cache spreads over both without preemption; killing one under load
loses nothing, and it is readmitted once it is back. The second engine is
the package's (conftest.py)."""

import asyncio
import signal
from pathlib import Path

import httpx

from deploy.local import free_port
from tests.support.engines import (
    MODEL,
    SMALL_ENGINE,
    Engine,
    engine_idle,
    launch_engine,
)
from tests.support.gateways import StartGateway
from tests.support.wait import wait_until


def preemptions(*engines: Engine) -> float:
    return sum(e.metric("vllm:num_preemptions_total") for e in engines)


async def stream(url: str, prompt: str, max_tokens: int) -> tuple[int, bytes]:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
    async with (
        httpx.AsyncClient(base_url=url, timeout=300) as http,
        http.stream("POST", "/v1/completions", json={**body, "stream": True}) as response,
    ):
        return response.status_code, b"".join([c async for c in response.aiter_raw()])


async def test_a_burst_larger_than_one_engine_spreads_over_both_without_preemption(
    idle_engine: Engine, second: Engine, start_gateway: StartGateway
) -> None:
    """Fourteen streams of 300 tokens need 3 blocks each: 42 blocks, more
    than one engine's 24; seven on each fit (no preemption allowed: the
    budget at 0)."""
    gateway = start_gateway(
        idle_engine.url, upstream_urls=f"{idle_engine.url},{second.url}", preemption_budget=0
    )
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    assert wait_until(lambda: gateway.metric("gateway_upstream_up") == 2, timeout=60)
    before = preemptions(idle_engine, second)
    replies = await asyncio.gather(*(stream(gateway.url, f"Spread {i}", 300) for i in range(14)))
    assert all(status == 200 and body.endswith(b"data: [DONE]\n\n") for status, body in replies)
    routed = {
        engine.url: gateway.metric("gateway_engine_requests_total", engine=engine.url[7:])
        for engine in (idle_engine, second)
    }
    preempted = preemptions(idle_engine, second) - before
    print(f"\nrouted to each engine: {list(routed.values())}, preemptions {preempted}")
    assert all(count >= 5 for count in routed.values())
    assert preempted == 0


async def test_killing_an_engine_under_load_loses_nothing_and_it_comes_back(
    idle_engine: Engine, start_gateway: StartGateway, tmp_path: Path
) -> None:
    port = free_port()
    doomed_url = f"http://127.0.0.1:{port}"
    # On a port of its own: it comes back there.
    doomed = launch_engine(f"engine-{port}", tmp_path, port, SMALL_ENGINE)
    try:
        doomed.wait_http(f"{doomed_url}/health", timeout=900)
        # The survivor then carries all sixteen: those queued behind it wait
        # as long as it takes (what is measured is that nothing is lost, not
        # the deadline, which a busy machine could pass).
        gateway = start_gateway(
            idle_engine.url, upstream_urls=f"{idle_engine.url},{doomed_url}", queue_timeout=240
        )
        gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
        assert wait_until(lambda: gateway.metric("gateway_upstream_up") == 2, timeout=60)

        streams = [asyncio.create_task(stream(gateway.url, f"Load {i}", 400)) for i in range(16)]
        label = doomed_url[7:]
        assert await asyncio.to_thread(
            wait_until,
            lambda: gateway.metric("gateway_engine_requests_in_flight", engine=label) > 0,
            120,
        )
        doomed.signal(signal.SIGKILL)
        replies = await asyncio.gather(*streams)

        # Every request ended once: completed, or — only if it had already
        # sent tokens from the killed engine — with the SSE error event.
        for status, body in replies:
            assert status == 200
            if not body.endswith(b"data: [DONE]\n\n"):
                assert body.rstrip().endswith(b"}}"), body[-200:]
                assert b'"text":"' in body, "a stream failed before its first token: not retried"
        failed = sum(1 for _, body in replies if not body.endswith(b"data: [DONE]\n\n"))
        outcomes = {
            o: gateway.metric("gateway_requests_total", outcome=o)
            for o in ("completed", "failed", "cancelled", "rejected")
        }
        retried = gateway.metric("gateway_engine_retries_total")
        print(f"\nengine killed under load: {outcomes}, retried elsewhere {retried}")
        assert outcomes["failed"] == failed
        assert sum(outcomes.values()) == 16
        assert gateway.metric("gateway_upstream_up", engine=label) == 0
        assert wait_until(lambda: engine_idle(idle_engine.metric), timeout=120)

        # Back: readmitted once its health check passes, and used again.
        doomed.stop()
        doomed = launch_engine(f"engine-{port}", tmp_path, port, SMALL_ENGINE)
        doomed.wait_http(f"{doomed_url}/health", timeout=900)
        assert wait_until(
            lambda: gateway.metric("gateway_upstream_up", engine=label) == 1, timeout=120
        )
        routed = gateway.metric("gateway_engine_requests_total", engine=label)
        await asyncio.gather(*(stream(gateway.url, f"After {i}", 50) for i in range(6)))
        assert gateway.metric("gateway_engine_requests_total", engine=label) > routed
    finally:
        doomed.stop()
