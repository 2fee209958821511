"""What a client's leaving shows: the gateway's cancellations by phase, the
engine going idle once the gateway closed its request, and whether the engine
aborted the request or ran it to its end."""

import time

from tests.support.engines import Engine, engine_idle
from tests.support.gateways import Gateway
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
