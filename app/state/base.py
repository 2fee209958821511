"""What keys and admission need from shared state.

Limits (per API key): requests in a moving window, tokens in a sliding log
that can be settled (a request is charged between its estimate and its worst
case when it is admitted — ``reservation`` — and pays what it really used
when it ends), and concurrent requests. Beside the log a store keeps, per
key, the part of the worst cases of its in-window, unsettled charges that
was not charged; ``app.keys.quota`` says why that keeps the bound.

Reserving and acquiring are awaited: the answer decides the request. Settling
and releasing are not: they are sent on and applied in order, so nothing on a
request's way out waits for a network round trip.
"""

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Verdict:
    """One limit's answer. ``reset_after``: seconds until the limit is back
    to its initial state; ``retry_after``: seconds until a refused request
    could pass (0 when allowed)."""

    allowed: bool
    limit: int
    remaining: int
    reset_after: float
    retry_after: float = 0.0
    # Tokens a token reservation charged (0 when refused, or for another limit).
    charged: int = 0


def reservation(unreserved: int, estimate: int, worst: int) -> int:
    """What a request is charged: its ``estimate``, raised to what the key's
    in-window, unsettled charges left ``unreserved`` of their worst cases,
    at most its ``worst`` case. The one rule of both stores (the Redis one
    runs it in Lua: ``scripts.RESERVE_TOKENS``)."""
    return min(worst, max(estimate, unreserved))


class SlotCounts(dict[str, int]):
    """Concurrent slots held per key; a key holding none is not kept."""

    def take(self, key: str) -> int:
        held = self[key] = self.get(key, 0) + 1
        return held

    def give_back(self, key: str) -> int:
        held = self.get(key, 0) - 1
        if held > 0:
            self[key] = held
        else:
            self.pop(key, None)
        return max(0, held)


class LimitStore(Protocol):
    async def hit_requests(self, key: str, limit: int, window: int) -> Verdict:
        """Count one request against ``limit`` per ``window`` seconds."""

    async def reserve_tokens(
        self, key: str, charge: str, estimate: int, worst: int, limit: int, window: int
    ) -> Verdict:
        """Charge ``reservation(unreserved, estimate, worst)`` tokens now under
        the id ``charge``, if the key's charges in the last ``window``
        seconds leave room for them; ``worst - charged`` joins the key's
        unreserved tokens (``Verdict.charged``: what was charged)."""

    def settle_tokens(self, key: str, charge: str, tokens: int) -> None:
        """Replace what ``charge`` reserved with what it used; its
        unreserved tokens leave the key's."""

    async def acquire_slot(self, key: str, limit: int) -> bool:
        """Take one of ``limit`` concurrent slots."""

    def release_slot(self, key: str) -> None: ...
