"""What a client's leaving shows: the gateway's cancellations by phase, the
engine going idle once the gateway closed its request, and whether the engine
aborted the request or ran it to its end."""

import time
from typing import Any

import httpx

from tests.support.engines import ENGINE_MAX_NUM_SEQS, MODEL, Engine, engine_idle
from tests.support.gateways import Gateway
from tests.support.streams import hold_streams, open_stream
from tests.support.wait import wait_until

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
