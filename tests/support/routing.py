"""Routes as the settings build them, for tests that pick among engines by
hand: ``GATEWAY_ROUTING=prefix``'s router, the same asked for a key, and a
cache view from a table."""

from collections.abc import Sequence
from dataclasses import dataclass

from app.routing.base import CacheView, Choice, EngineLoad, RouteRequest, Wait
from app.routing.load_cap import LoadCap
from app.routing.router import Router
from app.routing.scorers import PRESETS
from app.settings import Settings


@dataclass
class Held:
    """A cache view from a table: the leading blocks of the prompt each
    engine holds (every engine known: 0 where none)."""

    held_by: dict[str, int]

    def held(self, request: RouteRequest, engine: str) -> int:
        return self.held_by.get(engine, 0)


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
