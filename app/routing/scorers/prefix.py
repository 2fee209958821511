"""The engine that holds the most of the request's prompt in its prefix
cache, by what the engines report (``EngineLoad.held``, set by the router
from its cache view): the most held scores 1, the others their share of it.
Where nothing is known or nothing is held, every engine scores 0 and the
prompt's key decides among them (the router's tie-break), so a new prefix's
requests still meet on one engine before any has cached it."""

from collections.abc import Sequence

from app.routing.base import EngineLoad, RouteRequest


class HoldsThePrompt:
    def score(self, request: RouteRequest, engines: Sequence[EngineLoad]) -> list[float]:
        most = max((e.held or 0 for e in engines), default=0)
        if most <= 0:
            return [0.0] * len(engines)
        return [(e.held or 0) / most for e in engines]
