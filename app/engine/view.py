"""One engine as admission and routing see it.

The pool owns one view per engine and decides, in one place, whether
requests may go to it (``routable``: see ``app.engine.pool``); its monitor
keeps what it serves. Admission's budgets, admission-off's counters, the
retry rule and readiness all read these objects, so none keeps its own copy
of "is it up, what does it serve" that could lag or differ.
"""

from dataclasses import dataclass, field
from typing import Protocol


class EngineView(Protocol):
    @property
    def url(self) -> str:
        """The engine's base URL (its id everywhere)."""

    @property
    def routable(self) -> bool:
        """Requests may be placed on it now."""

    @property
    def models(self) -> frozenset[str]:
        """The model names it serves."""


@dataclass
class FixedView:
    """A view whose facts are set by hand: an engine not announced yet (not
    routable), and the pure tests of admission and routing."""

    url: str
    routable: bool = False
    models: frozenset[str] = field(default_factory=frozenset)
