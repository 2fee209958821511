"""The engine whose KV budget is emptiest: 1 with nothing reserved, 0 with
its budget (or more, under overcommit) reserved. Engines admission does not
budget (admission off) reserve nothing and score alike."""

from collections.abc import Sequence

from app.routing.base import EngineLoad, RouteRequest


class EmptiestBudget:
    def score(self, request: RouteRequest, engines: Sequence[EngineLoad]) -> list[float]:
        return [1.0 - min(1.0, max(0.0, e.reserved)) for e in engines]
