"""The engine running the fewest requests, relative to the others (as
llm-d's queue scorer): the fewest score 1, the most 0, the rest between;
all alike score 1. Relative, so that it weighs the same at 2 requests in
flight as at 200."""

from collections.abc import Sequence

from app.routing.base import EngineLoad, RouteRequest


class FewestInFlight:
    def score(self, request: RouteRequest, engines: Sequence[EngineLoad]) -> list[float]:
        counts = [e.in_flight for e in engines]
        low, high = min(counts, default=0), max(counts, default=0)
        if high == low:
            return [1.0] * len(engines)
        return [(high - n) / (high - low) for n in counts]
