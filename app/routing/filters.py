"""The filters every route starts with: an engine a request may go to is in
routing, serves the request's model, was not tried for it already, and is
the one it is pinned to, if any."""

from collections.abc import Sequence

from app.routing.base import EngineLoad, Filter, RouteRequest


class InRouting:
    """Not ejected."""

    def keep(self, request: RouteRequest, engine: EngineLoad) -> bool:
        return engine.up


class ServesModel:
    def keep(self, request: RouteRequest, engine: EngineLoad) -> bool:
        return not request.model or request.model in engine.models


class NotTried:
    """A retry goes elsewhere."""

    def keep(self, request: RouteRequest, engine: EngineLoad) -> bool:
        return engine.id not in request.excluded


class PinnedTo:
    """A request continuing state one engine holds goes there or nowhere."""

    def keep(self, request: RouteRequest, engine: EngineLoad) -> bool:
        return request.pinned is None or engine.id == request.pinned


ELIGIBLE: tuple[Filter, ...] = (InRouting(), ServesModel(), NotTried(), PinnedTo())


def eligible(
    request: RouteRequest, engines: Sequence[EngineLoad], filters: Sequence[Filter] = ELIGIBLE
) -> list[EngineLoad]:
    return [e for e in engines if all(f.keep(request, e) for f in filters)]
