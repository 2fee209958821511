"""Least loaded: the engine with the smallest reserved fraction of its KV
budget, then the fewest requests in flight, then by id (so that routing is
deterministic and the same on every replica)."""

from collections.abc import Sequence

from app.routing.base import Choice, EngineLoad


class LeastLoaded:
    def choose(
        self, affinity: int | None, engines: Sequence[EngineLoad], *, may_wait: bool = False
    ) -> Choice | None:
        fitting = [e for e in engines if e.fits]
        if not fitting:
            return None
        best = min(fitting, key=lambda e: (e.reserved, e.in_flight, e.id))
        return Choice(best.id)
