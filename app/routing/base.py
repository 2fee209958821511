"""The routing interfaces: what an engine looks like to routing, and the two
kinds of plug-in a route is made of.

A ``Filter`` drops engines a request may not go to (down, another model,
tried already); a ``Picker`` ranks the rest and picks one (least loaded,
prefix affinity with bounded load). ``app.routing.router.Router`` runs the
filters, then the picker: a new policy is a new small class, not an edit
in admission.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class EngineLoad:
    """One engine, as routing sees it for one request."""

    id: str
    # Requests admitted to it now (across replicas, as far as known).
    in_flight: int
    # Its share of the fleet's capacity (its KV budget, in blocks).
    weight: float
    # Its KV reservation as a fraction of its budget.
    reserved: float
    # Whether the request fits there now (KV budget and sequence cap).
    fits: bool
    # In routing: not ejected.
    up: bool = True
    models: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class RouteRequest:
    """What routing knows of a request."""

    # The model it asks for (None: any engine's).
    model: str | None = None
    # The key of its prompt's prefix (prefix affinity).
    affinity: int | None = None
    # Engines it may not go to: tried already (a retry).
    excluded: frozenset[str] = frozenset()
    # The one engine it may go to (it continues state held there).
    pinned: str | None = None


@dataclass(frozen=True)
class Choice:
    engine: str
    # The engine the request's prefix prefers (prefix routing), if any.
    preferred: str | None = None
    # The preferred engine had room but was loaded past the cap.
    overridden: bool = False


class Filter(Protocol):
    def keep(self, request: RouteRequest, engine: EngineLoad) -> bool:
        """Whether ``request`` may go to ``engine`` at all."""


class Picker(Protocol):
    def choose(self, affinity: int | None, engines: Sequence[EngineLoad]) -> Choice | None:
        """The engine for a request among ``engines`` that it fits, or None
        if it fits none. ``affinity`` keys the request's prompt prefix."""
