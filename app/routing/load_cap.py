"""The load cap: affinity with bounded load.

Affinity alone concentrates load — a hot document sends everyone to one
engine (the failure users of cache-aware routers report: a hit rate that
collapses, or a "death spiral" on one replica). So where routing weighs the
prompt, an engine may only take a request while its requests in flight stay
within ``factor`` times its fair share of the fleet's,
``factor × (total + 1) × weight / Σ weights`` (consistent hashing with
bounded loads) — or, at low load, within ``slack`` requests of that share: a
fair share below one request would otherwise send a prompt's second request
away from the engine that holds its prefix while every engine is nearly
idle. The load is read from admission's own accounting at the moment of the
decision, not from a sampled gauge seconds old, so requests decided
together see each other.

A prefix that one engine can carry (``app.routing.heat``) is held to a looser
bound on the engine that holds it, ``held_factor`` times its share (never
below ``factor``): the cap's overflow there would be a miss, computed
again elsewhere.
"""

import math
from collections.abc import Sequence

from app.routing.base import EngineLoad


class LoadCap:
    def __init__(self, factor: float = 1.25, slack: int = 2, held_factor: float = 2.0) -> None:
        if factor < 1.0:
            raise ValueError("the load factor must be at least 1")
        self.factor = factor
        self.slack = slack
        # Never tighter than the cap itself.
        self.held_factor = max(held_factor, factor)

    def under(self, engine: EngineLoad, fleet: Sequence[EngineLoad]) -> bool:
        """Whether ``engine`` may take one more request, ``fleet`` being
        every engine the request may go to."""
        return self._under(engine, fleet, self.factor)

    def under_held(self, engine: EngineLoad, fleet: Sequence[EngineLoad]) -> bool:
        """The same for a prefix ``engine`` holds and can carry."""
        return self._under(engine, fleet, self.held_factor)

    def _under(self, engine: EngineLoad, fleet: Sequence[EngineLoad], factor: float) -> bool:
        total = sum(e.in_flight for e in fleet)
        weights = sum(e.weight for e in fleet) or 1.0
        fair = (total + 1) * engine.weight / weights
        cap = max(math.ceil(factor * fair), math.ceil(fair) + self.slack)
        return engine.in_flight + 1 <= cap
