"""What a client's leaving shows: the gateway's cancellations by phase, the
engine going idle once the gateway closed its request, and whether the engine
aborted the request or ran it to its end."""

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

import httpx

from tests.support.engines import ENGINE_MAX_NUM_SEQS, MODEL, Engine, engine_idle
from tests.support.gateways import Gateway
from tests.support.streams import hold_streams, open_stream
from tests.support.wait import wait_for, wait_until

# A bound no slow abort reaches and no missing abort passes.
IDLE_WITHIN = 30.0


def cancels(gateway: Gateway, phase: str) -> float:
    return gateway.metric("gateway_cancellations_total", phase=phase)


def seconds_until_idle(engine: Engine, since: float) -> float:
    assert wait_until(lambda: engine_idle(engine.metric), timeout=IDLE_WITHIN, interval=0.05), (
        "the engine kept working after the client left"
    )
    return time.monotonic() - since


def ran_to_the_end(engine: Engine, asked_at_most: int | None = None) -> float:
    """How many requests the engine has run to their end, of those that asked
    for at most ``asked_at_most`` tokens (a bound of vLLM's 1-2-5 buckets:
    1000, 2000, ...; None counts all).

    vLLM counts a request here only when it finishes: an aborted one never,
    however many tokens it made before its abort arrived. So a test tells an
    abort from a run to the end by this count, whatever the machine's speed,
    where a bound on the tokens generated is a bound on the abort's delay."""
    bound = "+Inf" if asked_at_most is None else f"{float(asked_at_most)}"
    return engine.metric("vllm:request_params_max_tokens_bucket", le=bound)


# What a request that waits behind the blockers below asks for at most: one
# of vLLM's bucket bounds that the blockers pass.
WAITER_TOKENS = 1000
_BLOCKER = {"model": MODEL, "max_tokens": 1500, "ignore_eos": True}


async def leave_before_the_first_token(
    engine: Engine, gateway: Gateway, path: str, body: dict[str, Any]
) -> float:
    """Every sequence of ``engine`` taken by streams sent to it directly, a
    stream of ``body`` (at most ``WAITER_TOKENS``) sent to ``gateway``'s
    ``path`` waits in the engine's own queue, and its client leaves before
    its first token. Returns once the gateway counted it cancelled, the
    blockers were closed and the engine is idle: the seconds from the
    client's leaving. Whether the engine ran it to its end is the caller's
    to judge (``ran_to_the_end(engine, WAITER_TOKENS)``: blockers may end
    on their own while a slow machine waits, and are not counted there)."""
    before = cancels(gateway, "waiting_first_token")
    async with httpx.AsyncClient(base_url=engine.url, timeout=120) as direct:
        blockers = await hold_streams(direct, engine.url, _BLOCKER, ENGINE_MAX_NUM_SEQS)
        try:
            assert wait_until(
                lambda: engine.metric("vllm:num_requests_running") == ENGINE_MAX_NUM_SEQS,
                timeout=10,
            )
            async with (
                httpx.AsyncClient(base_url=gateway.url, timeout=60) as http,
                open_stream(http, body, path) as reply,
            ):
                assert reply.status_code == 200
                assert wait_until(
                    lambda: engine.metric("vllm:num_requests_waiting") >= 1, timeout=10
                )
            left = time.monotonic()
            assert wait_until(
                lambda: cancels(gateway, "waiting_first_token") == before + 1, timeout=30
            )
        finally:
            # Once the blockers are gone, a request the engine still held
            # would run to its end.
            for blocker in blockers:
                await blocker.aclose()
    return seconds_until_idle(engine, left)


async def leave_while_queued_and_running(
    engine: Engine,
    gateway: Gateway,
    path: str,
    body: dict[str, Any] | tuple[bytes, dict[str, str]],
    key: str,
) -> None:
    """A request that does not stream (an embedding, a classification, a
    score, a transcription): the engine's server is stopped (SIGSTOP), so one
    request stays in flight and the next waits in the gateway's queue (the
    gateway runs one sequence at a time); each client leaves where its
    request is, and each leaving is counted in its phase with nothing left
    held. The engine is started again (SIGCONT) whatever happens. ``body``: a
    JSON object, or a form's bytes and its headers."""
    phases = ("queued", "non_streaming")
    before = {phase: cancels(gateway, phase) for phase in phases}
    headers = {"authorization": f"Bearer {key}"}
    if isinstance(body, tuple):
        sent: dict[str, Any] = {"content": body[0], "headers": {**headers, **body[1]}}
    else:
        sent = {"json": body, "headers": headers}
    os.kill(engine.process.pid, signal.SIGSTOP)
    try:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
            running = asyncio.create_task(http.post(path, **sent))
            assert await wait_for(lambda: gateway.metric("gateway_requests_in_flight") == 1, 30)
            queued = asyncio.create_task(http.post(path, **sent))
            assert await wait_for(lambda: gateway.metric("gateway_queue_depth") == 1, 30)
            for task in (queued, running):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for phase in phases:
                assert await wait_for(
                    lambda phase=phase: cancels(gateway, phase) == before[phase] + 1,  # type: ignore[misc]
                    30,
                )
            assert gateway.metric("gateway_requests_in_flight") == 0
            assert gateway.metric("gateway_kv_tokens_reserved") == 0
    finally:
        os.kill(engine.process.pid, signal.SIGCONT)
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
