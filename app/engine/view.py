"""One engine as admission and routing see it.

The pool owns one view per engine and decides, in one place, whether
requests may go to it (``routable``: see ``app.engine.pool``); its monitor
keeps what it serves. Admission's budgets, admission-off's counters, the
retry rule and readiness all read these objects, so none keeps its own copy
of "is it up, what does it serve" that could lag or differ.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from app.engine.stats import LoraSlots
from app.routing.base import Adapters


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

    @property
    def adapters(self) -> frozenset[str]:
        """Those of ``models`` that are LoRA adapters."""

    @property
    def lora(self) -> LoraSlots | None:
        """Its LoRA slots and the adapters its requests use, as it reports
        them (None: no LoRA, or not known yet)."""


@dataclass
class FixedView:
    """A view whose facts are set by hand: an engine not announced yet (not
    routable), and the pure tests of admission and routing."""

    url: str
    routable: bool = False
    models: frozenset[str] = field(default_factory=frozenset)
    adapters: frozenset[str] = field(default_factory=frozenset)
    lora: LoraSlots | None = None


def adapters_of(view: EngineView, admitted: Iterable[str] = ()) -> Adapters:
    """What routing sees of ``view``'s adapters, with those of the requests
    ``admitted`` to it by this gateway (its last report may not show them)."""
    lora = view.lora
    return Adapters(
        served=view.adapters,
        slots=lora.slots if lora is not None else None,
        admitted=frozenset(admitted),
        reported=lora.active if lora is not None else frozenset(),
    )
