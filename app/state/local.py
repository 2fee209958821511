"""Shared state kept in this process: exact for one replica."""

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from limits import RateLimitItemPerSecond
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter

from app.state.base import SlotCounts, Verdict, reservation


@dataclass
class _TokenLog:
    """A key's token charges in time order, with their running total, and
    what each unsettled one left unreserved of its worst case, with theirs."""

    entries: deque[tuple[float, str]] = field(default_factory=deque)
    tokens: dict[str, int] = field(default_factory=dict)
    total: int = 0
    unreserved: dict[str, int] = field(default_factory=dict)
    unreserved_total: int = 0

    def expire(self, before: float) -> None:
        while self.entries and self.entries[0][0] <= before:
            _, charge = self.entries.popleft()
            self.total -= self.tokens.pop(charge, 0)
            self.drop_unreserved(charge)

    def drop_unreserved(self, charge: str) -> None:
        """``charge`` no longer counts among the unreserved (it settled or
        left the window)."""
        self.unreserved_total -= self.unreserved.pop(charge, 0)


class LocalLimits:
    """Limits in memory. Requests per window use the ``limits`` library's
    moving window; tokens use a log of charges (settling needs to change a
    charge after the fact, which a rate limiter cannot)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._requests = MovingWindowRateLimiter(MemoryStorage())
        self._logs: dict[str, _TokenLog] = {}
        self._slots = SlotCounts()
        self._clock = clock

    async def hit_requests(self, key: str, limit: int, window: int) -> Verdict:
        item = RateLimitItemPerSecond(limit, window)
        allowed = await self._requests.hit(item, key)
        stats = await self._requests.get_window_stats(item, key)
        reset = max(0.0, stats.reset_time - time.time())
        return Verdict(allowed, limit, stats.remaining, reset, 0.0 if allowed else reset)

    async def reserve_tokens(
        self, key: str, charge: str, estimate: int, worst: int, limit: int, window: int
    ) -> Verdict:
        now = self._clock()
        log = self._logs.setdefault(key, _TokenLog())
        log.expire(now - window)
        tokens = reservation(log.unreserved_total, estimate, worst)
        if log.total + tokens > limit:
            return Verdict(
                False,
                limit,
                max(0, limit - log.total),
                _reset(log, now, window),
                _room_after(log, now, window, limit - tokens),
            )
        log.entries.append((now, charge))
        log.tokens[charge] = tokens
        log.total += tokens
        if worst > tokens:
            log.unreserved[charge] = worst - tokens
            log.unreserved_total += worst - tokens
        return Verdict(True, limit, limit - log.total, _reset(log, now, window), charged=tokens)

    def settle_tokens(self, key: str, charge: str, tokens: int) -> None:
        log = self._logs.get(key)
        if log is None or charge not in log.tokens:
            return  # already out of the window
        log.total += tokens - log.tokens[charge]
        log.tokens[charge] = tokens
        log.drop_unreserved(charge)

    async def acquire_slot(self, key: str, limit: int) -> bool:
        if self._slots.get(key, 0) >= limit:
            return False
        self._slots.take(key)
        return True

    def release_slot(self, key: str) -> None:
        self._slots.give_back(key)


def _reset(log: _TokenLog, now: float, window: int) -> float:
    return log.entries[-1][0] + window - now if log.entries else 0.0


def _room_after(log: _TokenLog, now: float, window: int, allowed_total: int) -> float:
    """Seconds until the log's total is at most ``allowed_total``."""
    total = log.total
    for at, charge in log.entries:
        total -= log.tokens.get(charge, 0)
        if total <= allowed_total:
            return max(0.0, at + window - now)
    return float(window)
