"""What a client's leaving shows: the gateway's cancellations by phase, and
the engine going idle once the gateway closed its request."""

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
