"""The routing interfaces: what an engine looks like to routing, and the
kinds of plug-in a route is made of.

A ``Filter`` drops engines a request may not go to (down, another model,
tried already); a ``CacheView`` says how much of the request's prompt each
remaining engine already holds in its prefix cache (what the engines report
of it: ``app.routing.cached``); a ``Picker`` ranks them and picks one (least
loaded, prefix affinity with bounded load). ``app.routing.router.Router``
runs the filters, asks the cache view, then the picker: a new policy is a
new small class, not an edit in admission. A picker may also answer
``Wait``: hold the request a while for the engine that holds its prompt
(admission bounds the wait).
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from app.routing.block_index import PromptBlocks

# Why a request was ranked by its approximate prefix key although the
# engines' caches can be seen: its prompt's token ids are not known, or an
# engine's holdings are not (its events are not live).
Fallback = Literal["token_ids", "events"]


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
    # Leading blocks of the request's prompt its prefix cache holds (None:
    # not known). Set by the router from its cache view.
    held: int | None = None


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
    # Its prompt's token ids and cache salt, when known (what the engines'
    # prefix caches are looked up with).
    prompt: PromptBlocks | None = None
    # It may still wait for the engine that holds the most of its prompt
    # (``Wait``) rather than go elsewhere now: admission's bounded wait.
    may_wait: bool = False


@dataclass(frozen=True)
class Choice:
    engine: str
    # The engine the request's prefix prefers (prefix routing), if any.
    preferred: str | None = None
    # The preferred engine had room but was loaded past the cap.
    overridden: bool = False
    # Ranked without what the engines hold although their caches are
    # watched, and why (None: ranked by it, or not watched).
    fallback: Fallback | None = None
    # The engine the request waited for before this choice (``Wait``), if any.
    waited_for: str | None = None


@dataclass(frozen=True)
class Wait:
    """Hold the request for ``engine``, which holds the most of its prompt
    and has no room for it yet: going elsewhere now would compute the prompt
    again there and evict what that engine holds for others."""

    engine: str


class Filter(Protocol):
    def keep(self, request: RouteRequest, engine: EngineLoad) -> bool:
        """Whether ``request`` may go to ``engine`` at all."""


class CacheView(Protocol):
    def held(self, request: RouteRequest, engine: str) -> int | None:
        """Leading blocks of ``request``'s prompt that ``engine`` holds in its
        prefix cache, or None when that is not known now."""


class Picker(Protocol):
    def choose(
        self, affinity: int | None, engines: Sequence[EngineLoad], *, may_wait: bool = False
    ) -> Choice | Wait | None:
        """The engine for a request among ``engines`` that it fits, or None
        if it fits none. ``affinity`` keys the request's prompt prefix;
        ``may_wait``: the request may be held for a while (``Wait``) for an
        engine it does not fit now."""
