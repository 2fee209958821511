"""The routing interface."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class EngineLoad:
    """One engine that serves the request's model and is up."""

    id: str
    # Requests admitted to it now (across replicas, as far as known).
    in_flight: int
    # Its share of the fleet's capacity (its KV budget, in blocks).
    weight: float
    # Its KV reservation as a fraction of its budget.
    reserved: float
    # Whether the request fits there now (KV budget and sequence cap).
    fits: bool


@dataclass(frozen=True)
class Choice:
    engine: str
    # The engine the request's prefix prefers (prefix routing), if any.
    preferred: str | None = None
    # The preferred engine had room but was loaded past the cap.
    overridden: bool = False


class Router(Protocol):
    def choose(self, affinity: int | None, engines: Sequence[EngineLoad]) -> Choice | None:
        """The engine for a request among ``engines`` that it fits, or None
        if it fits none. ``affinity`` keys the request's prompt prefix."""
