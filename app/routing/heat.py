"""How much of the traffic a prompt's prefix brings: its heat.

The load cap keeps a hot document from burying one engine, and on the
skewed mix of the prefix benchmark it must: a document that brings 80% of
the requests needs more than one engine, and the cap's overflow copies it
to a second. But most prefixes bring far less than one engine's share —
eight documents over two engines, 12% each — and for those an overflow
past the cap is a miss: the other engine computes the document again and
evicts one of its own to hold it, and the next request of that document
misses there in turn (docs/benchmarks.md, "a prefix one engine can carry
stays on it").

So the router asks whether a prefix is hot: whether its share of the
recent requests is more than the engines holding it can carry at their
fair share. A prefix that is not stays on its holder up to a looser bound
(``GATEWAY_ROUTING_HELD_LOAD_FACTOR``); a hot one goes on at the load cap.

Shares are counted over the last requests with an exponential decay (a
window of about ``window`` requests), lazily: each prefix keeps its count
and the request number it was last brought to, so a request costs one
update whatever the prefixes. This replica's own count: each replica sees
its part of the traffic, and the shares are the same in every part.
Bounded like the homes: the least recently seen prefix is forgotten first.
"""

from collections import OrderedDict

from app.routing.homes import HOMES

# About how many requests the shares are measured over.
WINDOW = 512
# Below this many requests' worth of history a share is not known, and
# every prefix counts as carried: at the start the engines are empty and
# the homes spread new prefixes by load, so a hot one shows within the
# first requests; held to the cap meanwhile, the documents of the first
# burst would overflow onto each other's engines and evict each other.
TRUSTED = 64


class PrefixHeat:
    def __init__(self, window: int = WINDOW, size: int = HOMES, trusted: int = TRUSTED) -> None:
        if window < 2 or size < 1:
            raise ValueError("heat needs a window of two requests and room for one prefix")
        self._keep = 1.0 - 1.0 / window
        self._size = size
        self._trusted = trusted
        # The requests counted so far, and each prefix's decayed count as of
        # the request number beside it.
        self._seen = 0
        self._counts: OrderedDict[int, tuple[float, int]] = OrderedDict()

    def observe(self, key: int) -> None:
        """One more request of ``key``'s prefix."""
        self._seen += 1
        self._counts[key] = (self._count(key) + 1.0, self._seen)
        self._counts.move_to_end(key)
        while len(self._counts) > self._size:
            self._counts.popitem(last=False)

    def share(self, key: int) -> float | None:
        """``key``'s part of the recent requests (None: too few to say)."""
        keep, seen = self._keep, self._seen
        total = (1.0 - keep**seen) / (1.0 - keep)
        if total < self._trusted:
            return None
        return self._count(key) / total

    def carried(self, key: int, holders: int, engines: int) -> bool:
        """Whether ``holders`` of ``engines`` carry ``key``'s prefix at their
        fair share: its share of the requests at most theirs of the fleet
        (while no share is known yet, every prefix)."""
        share = self.share(key)
        return share is None or share * engines <= holders

    def _count(self, key: int) -> float:
        count, at = self._counts.get(key, (0.0, self._seen))
        return count * self._keep ** (self._seen - at)
