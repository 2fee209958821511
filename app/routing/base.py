"""The routing interfaces: what an engine looks like to routing, and the
kinds of plug-in a route is made of.

A route is a pipeline of small plug-ins, as in llm-d's inference scheduler:

- a ``Filter`` drops engines a request may not go to (down, another model,
  tried already, not the one it is pinned to);
- a ``CacheView`` says how much of the request's prompt each remaining
  engine already holds in its prefix cache (what the engines report of it:
  ``app.routing.cached``);
- each ``Scorer`` gives every remaining engine a score in [0, 1] for this
  request (``app.routing.scorers``: how empty its KV budget is, how few
  requests it runs, how much of the prompt it holds); the weights in the
  settings add them up;
- the picker (``app.routing.router``) takes the best-scored engine where the
  request fits now and, with a load cap, that is under its cap.

A new signal is a new scorer (a file and its entry in the scorers' table),
not an edit in admission or the picker. The router may also answer
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
class Adapters:
    """An engine's LoRA adapters, as routing sees them."""

    # Those of its models that are adapters.
    served: frozenset[str] = frozenset()
    # Its LoRA slots (``--max-loras``; None: not known, or no LoRA).
    slots: int | None = None
    # The adapters of the requests this gateway has admitted to it: exact,
    # and newer than any report.
    admitted: frozenset[str] = frozenset()
    # The adapters it last reported running or waiting (a second old at
    # most): other replicas' requests, or ones that have ended since.
    reported: frozenset[str] = frozenset()

    @property
    def active(self) -> frozenset[str]:
        return self.admitted | self.reported


NO_ADAPTERS = Adapters()


@dataclass(frozen=True, kw_only=True)
class EngineLoad:
    """One engine, as routing sees it for one request (every field named:
    an engine that admission does not budget — admission off, a light call —
    is ``EngineLoad(id=..., up=..., models=...)`` and the rest defaults to
    empty and fitting)."""

    id: str
    # Requests admitted to it now (across replicas, as far as known).
    in_flight: int = 0
    # Its share of the fleet's capacity (its KV budget, in blocks).
    weight: float = 1.0
    # Its KV reservation as a fraction of its budget.
    reserved: float = 0.0
    # Whether the request fits there now (KV budget and sequence cap).
    fits: bool = True
    # In routing: not ejected.
    up: bool = True
    models: frozenset[str] = field(default_factory=frozenset)
    # Leading blocks of the request's prompt its prefix cache holds (None:
    # not known). Set by the router from its cache view.
    held: int | None = None
    adapters: Adapters = NO_ADAPTERS


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


class Scorer(Protocol):
    def score(self, request: RouteRequest, engines: Sequence[EngineLoad]) -> list[float]:
        """Each of ``engines``' score for ``request``, in [0, 1] (1: the best
        place for it by this scorer's signal), in the engines' order."""
