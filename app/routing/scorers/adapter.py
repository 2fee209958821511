"""The engine that has the request's LoRA adapter in a slot already.

An engine runs at most ``--max-loras`` adapters at once; a request for an
adapter that is not in a slot waits in the engine ("deferred") until a slot
frees, and then the adapter is swapped in — while another engine may be
running that adapter already. So, for a request whose model is an adapter:

- an engine whose requests use the adapter now scores 1: admitted there by
  this gateway, or reported running or waiting there (by other replicas'
  requests) in a slot this gateway's own requests do not fill;
- one with a slot no adapter uses scores ``FREE_SLOT``: the adapter loads
  there without making anyone wait;
- one whose slots are all in use scores 0: its requests would take turns.

An engine whose slots are not known (no report yet) counts as having a free
one. A request for a base model scores every engine alike. Where the
engines using the adapter have no room for the request, the router places it
on the best of the others: that is how an adapter spreads over more engines
when one cannot carry it (admission decides "no room": the engine's KV
budget and sequence cap). The load cap does not spread it sooner: it
bounds prompt affinity, where any engine serves a request alike; here the
other engine would have to swap the adapter in, making its own requests wait.
"""

from collections.abc import Sequence

from app.routing.base import EngineLoad, RouteRequest

FREE_SLOT = 0.5


class RunsTheAdapter:
    def score(self, request: RouteRequest, engines: Sequence[EngineLoad]) -> list[float]:
        model = request.model
        if model is None or not any(model in e.adapters.served for e in engines):
            return [1.0] * len(engines)
        return [_score(model, e) for e in engines]


def _score(model: str, engine: EngineLoad) -> float:
    adapters = engine.adapters
    if model in adapters.admitted:
        return 1.0
    # A report names what ran up to a second ago; where this gateway's own
    # requests fill every slot, an adapter it names there is not running
    # now, or waits its turn.
    if model in adapters.reported and (
        adapters.slots is None or len(adapters.admitted) < adapters.slots
    ):
        return 1.0
    if adapters.slots is None or len(adapters.active) < adapters.slots:
        return FREE_SLOT
    return 0.0
