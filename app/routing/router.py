"""A route: the filters, what the engines hold of the prompt, the picker.

With a cache view (the engines' KV cache events), each engine the filters
keep carries how many of the prompt's leading blocks it holds — for every
engine or for none: a count known for some engines only would favour those
whose events happen to be live over one that may hold more, so when any is
unknown (or the prompt's token ids are), the picker ranks by the prompt's
approximate key alone, and the choice says why (``Choice.fallback``).
"""

import dataclasses
from collections.abc import Sequence

from app.routing.base import (
    CacheView,
    Choice,
    EngineLoad,
    Fallback,
    Filter,
    Picker,
    RouteRequest,
    Wait,
)
from app.routing.filters import ELIGIBLE, eligible
from app.routing.least_loaded import LeastLoaded


class Router:
    def __init__(
        self,
        picker: Picker | None = None,
        filters: Sequence[Filter] = ELIGIBLE,
        cache: CacheView | None = None,
    ):
        self.picker: Picker = picker or LeastLoaded()
        self.filters = tuple(filters)
        self.cache = cache

    def choose(self, request: RouteRequest, engines: Sequence[EngineLoad]) -> Choice | Wait | None:
        """The engine for ``request``, or None if no engine may take it now
        (``Wait``: it waits for one, which ``request.may_wait`` allows)."""
        candidates = eligible(request, engines, self.filters)
        if not candidates:
            return None
        fallback: Fallback | None = None
        if self.cache is not None:
            candidates, fallback = self._with_held(request, candidates)
        choice = self.picker.choose(request.affinity, candidates, may_wait=request.may_wait)
        if not isinstance(choice, Choice) or fallback is None:
            return choice
        return dataclasses.replace(choice, fallback=fallback)

    def _with_held(
        self, request: RouteRequest, engines: list[EngineLoad]
    ) -> tuple[list[EngineLoad], Fallback | None]:
        assert self.cache is not None
        if request.prompt is None:
            return engines, "token_ids"
        held = [self.cache.held(request, e.id) for e in engines]
        if any(h is None for h in held):
            return engines, "events"
        return [dataclasses.replace(e, held=h) for e, h in zip(engines, held, strict=True)], None
