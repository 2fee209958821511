"""Prefix affinity with bounded load.

Requests that share a prompt prefix (a system prompt, a RAG document, the
conversation so far) should meet on one engine, so that vLLM's prefix cache
serves the shared part instead of computing it again. Each prefix key ranks
the engines by rendezvous hashing (highest random weight): the ranking is
the same on every gateway replica with no shared state, and when an engine
joins or leaves, only the keys it wins or held move.

Where the engines report what they hold (their KV cache events: the router
sets each engine's ``held``, the leading blocks of the prompt it holds), the
engine that holds the most of the prompt ranks first, and the key's ranking
only breaks ties — among engines that hold equally much, or nothing yet: a
new prefix's requests still meet on one engine before any has cached it.
That replaces a guess (the key is the prompt's first couple of thousand
characters, and the engine it prefers may have evicted them long ago) with
what the engine says it holds, block by block.

Affinity alone concentrates load — a hot document sends everyone to one
engine (the failure users of cache-aware routers report: a hit rate that
collapses, or a "death spiral" on one replica). So an engine may only take a
request while its requests in flight stay within ``factor`` times its fair
share of the fleet's, ``factor × (total + 1) × weight / Σ weights``
(consistent hashing with bounded loads) — or, at low load, within ``slack``
requests of that share: a fair share below one request would otherwise send
a prompt's second request away from the engine that holds its prefix while
every engine is nearly idle. The first engine in the key's ranking that fits
and is under its cap gets the request; the load is read from admission's own
accounting at the moment of the decision, not from a sampled gauge seconds
old, so requests decided together see each other.

Affinity is a preference: the router chooses among engines where the
request fits now; when none is under its cap (the fleet is nearly full), the
least loaded that fits takes it. One exception, bounded by admission: where
an engine reports holding more of the prompt than any engine with room, is
under its cap and has no room for the request yet, a request that may wait
(``may_wait``: it has not waited its ``GATEWAY_ROUTING_AFFINITY_WAIT`` yet)
waits for it (``Wait``). Going elsewhere at once computes the prompt again
there and evicts what that engine holds for its own requests — with a
working set larger than one engine's cache, the overflow from a full engine
is what spreads every document over both caches (docs/benchmarks.md). An
engine's holdings are known only from its KV cache events; ranked by the
key alone, nothing waits.
"""

import hashlib
import math
from collections.abc import Sequence

from app.routing.base import Choice, EngineLoad, Wait
from app.routing.least_loaded import LeastLoaded


class PrefixAffinity:
    def __init__(self, factor: float = 1.25, slack: int = 2) -> None:
        if factor < 1.0:
            raise ValueError("the load factor must be at least 1")
        self.factor = factor
        self.slack = slack
        self._fallback = LeastLoaded()

    def choose(
        self, affinity: int | None, engines: Sequence[EngineLoad], *, may_wait: bool = False
    ) -> Choice | Wait | None:
        if affinity is None:
            return self._fallback.choose(None, engines)
        ranked = sorted(engines, key=lambda e: (e.held or 0, _weight(affinity, e.id)), reverse=True)
        if not ranked:
            return None
        preferred = ranked[0]
        total = sum(e.in_flight for e in engines)
        weights = sum(e.weight for e in engines) or 1.0

        def under_cap(engine: EngineLoad) -> bool:
            fair = (total + 1) * engine.weight / weights
            cap = max(math.ceil(self.factor * fair), math.ceil(fair) + self.slack)
            return engine.in_flight + 1 <= cap

        if may_wait and self._worth_waiting(preferred, engines) and under_cap(preferred):
            return Wait(preferred.id)
        if not any(e.fits for e in engines):
            return None
        for engine in ranked:
            if engine.fits and under_cap(engine):
                overridden = engine is not preferred and preferred.fits
                return Choice(engine.id, preferred.id, overridden)
        fallback = self._fallback.choose(None, engines)
        assert isinstance(fallback, Choice)
        return Choice(fallback.engine, preferred.id, preferred.fits)

    @staticmethod
    def _worth_waiting(preferred: EngineLoad, engines: Sequence[EngineLoad]) -> bool:
        """``preferred`` reports holding part of the prompt, has no room for
        it now, and no engine with room holds as much."""
        held = preferred.held or 0
        return (
            held > 0
            and not preferred.fits
            and not any(e.fits and (e.held or 0) >= held for e in engines)
        )


def _weight(key: int, engine: str) -> int:
    digest = hashlib.blake2b(f"{key}:{engine}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
