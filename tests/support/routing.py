"""Routes as the settings build them, for tests that pick among engines by
hand: ``GATEWAY_ROUTING=prefix``'s router, and the same asked for a key."""

from collections.abc import Sequence

from app.routing.base import CacheView, Choice, EngineLoad, RouteRequest, Wait
from app.routing.load_cap import LoadCap
from app.routing.router import Router
from app.routing.scorers import PRESETS
from app.settings import Settings

# The settings' defaults.
FACTOR: float = Settings.model_fields["routing_load_factor"].default
SLACK: int = Settings.model_fields["routing_load_slack"].default


def prefix_router(
    cache: CacheView | None = None, factor: float = FACTOR, slack: int = SLACK
) -> Router:
    """The router ``GATEWAY_ROUTING=prefix`` builds (the settings' defaults)."""
    return Router(PRESETS["prefix"], cap=LoadCap(factor, slack), cache=cache, name="prefix")


class PrefixRoute:
    """The prefix route asked where a prompt key goes among engines."""

    def __init__(self, factor: float = FACTOR, slack: int = SLACK) -> None:
        self.router = prefix_router(factor=factor, slack=slack)

    def choose(
        self, key: int | None, engines: Sequence[EngineLoad], *, may_wait: bool = False
    ) -> Choice | Wait | None:
        return self.router.choose(RouteRequest(affinity=key, may_wait=may_wait), engines)
