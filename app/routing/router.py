"""A route: the filters, what the engines hold of the prompt, the scorers,
the pick.

The scorers (``app.routing.scorers``) each give every engine the filters
keep a score in [0, 1]; their weighted sum ranks the engines, ties broken by
the prompt's key (rendezvous hashing, where the route weighs the prompt),
then by the least reserved budget, the fewest requests in flight and the id
— so that routing is deterministic and the same on every replica. The
request goes to the best-ranked engine where it fits now and, where the
route has a load cap, that is under it; when none is under its cap (the
fleet is nearly full), to the least loaded where it fits. Where moving it
would miss (the engine holding the most of the prompt is past the cap, the
others hold less; or, held nowhere, it is at its home), it stays while the
prefix is not hot: while the engines holding it can carry its share of the
traffic (``app.routing.heat``), up to the looser held bound.

With a cache view (the engines' KV cache events), each engine carries how
many of the prompt's leading blocks it holds — for every engine or for
none: a count known for some engines only would favour those whose events
happen to be live over one that may hold more, so when any is unknown (or
the prompt's token ids are), the route ranks by the prompt's key alone and
the choice says why (``Choice.fallback``).

One exception, bounded by admission: where an engine reports holding more
of the prompt than any engine with room, is under its cap and has no room
for the request yet, a request that may wait (``may_wait``: it has not
waited its ``GATEWAY_ROUTING_AFFINITY_WAIT`` yet) waits for it (``Wait``).
"""

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from app.routing.base import (
    CacheView,
    Choice,
    EngineLoad,
    Fallback,
    Filter,
    RouteRequest,
    Scorer,
    Wait,
)
from app.routing.filters import ELIGIBLE, eligible
from app.routing.heat import PrefixHeat
from app.routing.homes import Homes
from app.routing.load_cap import LoadCap
from app.routing.rendezvous import key_weight
from app.routing.scorers import PRESETS, READS_PROMPTS, SCORERS, ScorerName


class Router:
    def __init__(
        self,
        weights: Mapping[ScorerName, float] | None = None,
        *,
        cap: LoadCap | None = None,
        cache: CacheView | None = None,
        filters: Sequence[Filter] = ELIGIBLE,
        name: str = "least_loaded",
        table: Mapping[ScorerName, Callable[[], Scorer]] = SCORERS,
        homes: Homes | None = None,
        heat: PrefixHeat | None = None,
    ):
        # What the route is called in traces and logs: its preset, or its weights.
        self.name = name
        weights = PRESETS["least_loaded"] if weights is None else weights
        # A scorer at weight 0 is out of the decision: not even asked.
        self.scorers = [(table[name](), w) for name, w in weights.items() if w > 0]
        if not self.scorers:
            raise ValueError("a route needs a scorer with a weight above 0")
        # Whether the route ranks by the request's prompt (and so needs its
        # tokens counted, its key, what the engines hold of it).
        self.reads_prompts = any(w > 0 and n in READS_PROMPTS for n, w in weights.items())
        self.cap = cap
        self.cache = cache if self.reads_prompts else None
        # Where prefixes no engine holds are computed (``app.routing.homes``);
        # None: by their key alone (rendezvous hashing).
        self.homes = homes if self.reads_prompts else None
        # Which prefixes one engine can carry (``app.routing.heat``); None:
        # every prefix is held to the load cap.
        self.heat = heat if self.reads_prompts else None
        self.filters = tuple(filters)

    def choose(self, request: RouteRequest, engines: Sequence[EngineLoad]) -> Choice | Wait | None:
        """The engine for ``request``, or None if no engine may take it now
        (``Wait``: it waits for one, which ``request.may_wait`` allows)."""
        candidates = eligible(request, engines, self.filters)
        if not candidates:
            return None
        fallback: Fallback | None = None
        if self.cache is not None:
            candidates, fallback = self._with_held(request, candidates)
        home = self._home(request, candidates)
        ranked = self.rank(request, candidates, home)
        preferred = ranked[0] if self.reads_prompts and request.affinity is not None else None
        cap = self.cap
        if (
            preferred is not None
            and request.may_wait
            and _worth_waiting(preferred, candidates)
            and (cap is None or self._under_cap(request, preferred, candidates, home))
        ):
            return Wait(preferred.id)
        fitting = [e for e in ranked if e.fits]
        if not fitting:
            return None
        if cap is not None and _for_an_adapter(request, candidates):
            # An adapter stays where it runs until those engines have no
            # room: another engine would have to swap it in (the adapter
            # scorer), which costs more than the load the cap would spread.
            cap = None
        allowed = fitting if cap is None else [e for e in fitting if cap.under(e, candidates)]
        chosen = allowed[0] if allowed else min(fitting, key=_least_loaded)
        if (
            cap is not None
            and preferred is not None
            and preferred.fits
            and _keeps(preferred, chosen, home)
            and self._under_cap(request, preferred, candidates, home)
        ):
            # Moved, the prompt would miss and evict another there: it stays
            # while its holder can carry it (a prefix not hot, under the held
            # bound).
            chosen = preferred
        overridden = preferred is not None and chosen is not preferred and preferred.fits
        if self.homes is not None and request.affinity is not None and home is None:
            self.homes.settle(request.affinity, chosen.id)
        if self.heat is not None and request.affinity is not None:
            self.heat.observe(request.affinity)
        return Choice(
            chosen.id,
            preferred.id if preferred is not None else None,
            overridden,
            fallback=fallback,
        )

    def rank(
        self, request: RouteRequest, engines: Sequence[EngineLoad], home: str | None = None
    ) -> list[EngineLoad]:
        """``engines``, best first: by their weighted scores, then the
        tie-breaks: the prompt's home (``home``, one of ``engines``) first;
        a prompt with no home where homes are kept goes to the least loaded;
        otherwise by the prompt's key, then the least loaded."""
        totals = [0.0] * len(engines)
        for scorer, weight in self.scorers:
            for i, score in enumerate(scorer.score(request, engines)):
                totals[i] += weight * score
        key = request.affinity if self.reads_prompts else None
        by_load = key is not None and home is None and self.homes is not None

        def tie(engine: EngineLoad) -> tuple[object, ...]:
            if key is None:
                return _least_loaded(engine)
            if by_load:
                return (engine.reserved, engine.in_flight, -key_weight(key, engine.id), engine.id)
            return (engine.id != home, -key_weight(key, engine.id), *_least_loaded(engine))

        order = sorted(range(len(engines)), key=lambda i: (-totals[i], *tie(engines[i])))
        return [engines[i] for i in order]

    def _under_cap(
        self,
        request: RouteRequest,
        holder: EngineLoad,
        engines: Sequence[EngineLoad],
        home: str | None,
    ) -> bool:
        """Whether ``holder``, the engine holding the most of the prompt (or,
        where none holds any, its home), may take it: under the load cap,
        or — a prefix the engines holding as much can carry at their share
        (``app.routing.heat``) — under the held bound."""
        assert self.cap is not None
        if self.cap.under(holder, engines):
            return True
        if self.heat is None or request.affinity is None:
            return False
        held = holder.held or 0
        if held > 0:
            holders = sum(1 for e in engines if (e.held or 0) >= held)
        elif holder.id == home:
            holders = 1
        else:
            return False
        return self.heat.carried(request.affinity, holders, len(engines)) and (
            self.cap.under_held(holder, engines)
        )

    def _home(self, request: RouteRequest, engines: Sequence[EngineLoad]) -> str | None:
        """The prompt's home among ``engines``, if it has one there."""
        if self.homes is None or request.affinity is None:
            return None
        home = self.homes.get(request.affinity)
        return home if any(e.id == home for e in engines) else None

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


def _least_loaded(engine: EngineLoad) -> tuple[float, int, str]:
    return (engine.reserved, engine.in_flight, engine.id)


def _worth_waiting(preferred: EngineLoad, engines: Sequence[EngineLoad]) -> bool:
    """``preferred`` reports holding part of the prompt, has no room for it
    now, and no engine with room holds as much."""
    held = preferred.held or 0
    return (
        held > 0
        and not preferred.fits
        and not any(e.fits and (e.held or 0) >= held for e in engines)
    )


def _keeps(preferred: EngineLoad, chosen: EngineLoad, home: str | None) -> bool:
    """Whether the request would lose by going to ``chosen`` rather than
    ``preferred``: a miss (``preferred`` holds more of the prompt), or a
    prefix nobody holds computed away from its home."""
    held, there = preferred.held or 0, chosen.held or 0
    return held > there or (held == there == 0 and preferred.id == home)


def _for_an_adapter(request: RouteRequest, engines: Sequence[EngineLoad]) -> bool:
    return request.model is not None and any(request.model in e.adapters.served for e in engines)
