"""A client that goes away stops the engine's work, in every phase.

Against the real engine: after each disconnect the engine goes idle, and it
aborted the request rather than ran it to its end (vLLM counts only requests
that end; the tokens made before the abort arrived depend on the machine's
speed, so they are printed, not bounded). The time from disconnect to an idle
engine is printed too (run with ``-s`` to see it).
"""

import asyncio
import contextlib
import time

import httpx
import psutil

from tests.support.disconnects import (
    IDLE_WITHIN,
    WAITER_TOKENS,
    cancels,
    leave_before_the_first_token,
    ran_to_the_end,
    seconds_until_idle,
)
from tests.support.engines import MODEL, Engine, engine_idle
from tests.support.gateways import Gateway
from tests.support.streams import open_stream, read_content_chunks
from tests.support.wait import wait_for, wait_until

MAX_TOKENS = 1500
LONG = {"model": MODEL, "max_tokens": MAX_TOKENS, "ignore_eos": True}


def generated_since(engine: Engine, before: float) -> float:
    return engine.metric("vllm:generation_tokens_total") - before


async def test_disconnect_mid_stream(idle_engine: Engine, gateway: Gateway) -> None:
    before_tokens = idle_engine.metric("vllm:generation_tokens_total")
    ended = ran_to_the_end(idle_engine)
    before = cancels(gateway, "streaming")
    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=60) as http,
        open_stream(http, {**LONG, "prompt": "The river"}) as response,
    ):
        assert response.status_code == 200
        await read_content_chunks(response, 5)
    left = time.monotonic()
    took = seconds_until_idle(idle_engine, left)
    generated = generated_since(idle_engine, before_tokens)
    print(
        f"\nmid-stream disconnect: engine idle after {took:.3f}s, {generated:.0f} tokens generated"
    )
    assert ran_to_the_end(idle_engine) == ended, "the engine ran the request to its end"
    assert wait_until(lambda: cancels(gateway, "streaming") == before + 1, timeout=30)
    assert gateway.metric("gateway_requests_in_flight") == 0


async def test_disconnect_during_a_non_streaming_call(
    idle_engine: Engine, gateway: Gateway
) -> None:
    before_tokens = idle_engine.metric("vllm:generation_tokens_total")
    ended = ran_to_the_end(idle_engine)
    before = cancels(gateway, "non_streaming")

    def generating() -> bool:
        """The gateway sent the call on and the engine runs it: the call is
        in its non-streaming phase."""
        return (
            gateway.metric("gateway_requests_in_flight") == 1
            and idle_engine.metric("vllm:num_requests_running") == 1
        )

    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        call = asyncio.create_task(
            http.post("/v1/completions", json={**LONG, "prompt": "The orchard"})
        )
        assert await wait_for(generating, timeout=30)
        assert not call.done(), "the call finished before the client gave up"
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
    left = time.monotonic()
    took = seconds_until_idle(idle_engine, left)
    generated = generated_since(idle_engine, before_tokens)
    print(f"\nnon-streaming disconnect: engine idle after {took:.3f}s, {generated:.0f} tokens")
    assert ran_to_the_end(idle_engine) == ended, "the engine ran the request to its end"
    assert wait_until(lambda: cancels(gateway, "non_streaming") == before + 1, timeout=30)


async def test_disconnect_while_waiting_for_the_first_token(
    idle_engine: Engine, gateway: Gateway
) -> None:
    """The engine is saturated (every sequence slot taken), so the request
    waits in the engine's queue; the client leaves before its first token."""
    ended = ran_to_the_end(idle_engine, asked_at_most=WAITER_TOKENS)
    body = {**LONG, "max_tokens": WAITER_TOKENS, "prompt": "The museum"}
    took = await leave_before_the_first_token(idle_engine, gateway, "/v1/completions", body)
    print(f"\nwaiting-first-token disconnect: engine idle {took:.3f}s after the client left")
    assert ran_to_the_end(idle_engine, asked_at_most=WAITER_TOKENS) == ended, (
        "the engine ran the request to its end"
    )


async def test_fifty_disconnects_leave_nothing_behind(
    idle_engine: Engine, gateway: Gateway
) -> None:
    before_tokens = idle_engine.metric("vllm:generation_tokens_total")
    ended = ran_to_the_end(idle_engine)
    before = cancels(gateway, "streaming")
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        for i in range(50):
            async with open_stream(http, {**LONG, "prompt": f"Round {i}"}) as response:
                await read_content_chunks(response, 1)
    assert wait_until(lambda: engine_idle(idle_engine.metric), timeout=IDLE_WITHIN)
    generated = generated_since(idle_engine, before_tokens)
    print(f"\nfifty disconnects: {generated:.0f} tokens generated")
    assert ran_to_the_end(idle_engine) == ended, "the engine ran a request to its end"
    assert wait_until(lambda: cancels(gateway, "streaming") == before + 50, timeout=10)
    assert gateway.metric("gateway_requests_in_flight") == 0

    # The gateway's connections to the engine were closed, not leaked: what
    # remains is at most a few idle keep-alive connections.
    engine_port = int(idle_engine.url.rsplit(":", 1)[1])
    open_to_engine = [
        conn
        for conn in psutil.Process(gateway.process.pid).net_connections(kind="tcp")
        if conn.raddr and conn.raddr.port == engine_port and conn.status == psutil.CONN_ESTABLISHED
    ]
    assert len(open_to_engine) <= 3

    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        reply = await http.post(
            "/v1/completions", json={**LONG, "prompt": "Still", "max_tokens": 5}
        )
    assert reply.status_code == 200
    assert reply.json()["usage"]["completion_tokens"] == 5


async def test_concurrent_disconnects_mid_stream(idle_engine: Engine, gateway: Gateway) -> None:
    """Disconnects that land together are each noticed, and each ends its
    request in the engine: six streams of 1,500 tokens run to the end would
    go idle within the bound on their own, so the count of requests run to
    their end tells."""
    before_tokens = idle_engine.metric("vllm:generation_tokens_total")
    ended = ran_to_the_end(idle_engine)
    before = cancels(gateway, "streaming")

    async def one(i: int) -> None:
        async with (
            httpx.AsyncClient(base_url=gateway.url, timeout=60) as http,
            open_stream(http, {**LONG, "prompt": f"Many {i}"}) as response,
        ):
            await read_content_chunks(response, 3)

    await asyncio.gather(*(one(i) for i in range(6)))
    assert wait_until(lambda: engine_idle(idle_engine.metric), timeout=IDLE_WITHIN)
    generated = generated_since(idle_engine, before_tokens)
    print(f"\nsix concurrent disconnects: {generated:.0f} tokens generated")
    assert ran_to_the_end(idle_engine) == ended, "the engine ran a request to its end"
    assert wait_until(lambda: cancels(gateway, "streaming") == before + 6, timeout=10)
