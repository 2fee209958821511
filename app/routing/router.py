"""A route: the filters, then the picker."""

from collections.abc import Sequence

from app.routing.base import Choice, EngineLoad, Filter, Picker, RouteRequest
from app.routing.filters import ELIGIBLE, eligible
from app.routing.least_loaded import LeastLoaded


class Router:
    def __init__(self, picker: Picker | None = None, filters: Sequence[Filter] = ELIGIBLE):
        self.picker: Picker = picker or LeastLoaded()
        self.filters = tuple(filters)

    def choose(self, request: RouteRequest, engines: Sequence[EngineLoad]) -> Choice | None:
        """The engine for ``request``, or None if no engine may take it now."""
        candidates = eligible(request, engines, self.filters)
        return self.picker.choose(request.affinity, candidates) if candidates else None
