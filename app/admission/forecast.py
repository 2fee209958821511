"""When a request will be admitted: how fast the queue drains, the wait that
predicts, and the Retry-After a refused client is told. No I/O, no clock.

*Refusing early.* The queue drains at a rate the policy measures: tokens
admitted out of a backlog per second of backlog (idle time does not count, so
a quiet spell does not make the engine look slow). A new request whose
predicted wait — the tokens the order admits before it, over that rate — is
longer than the queue's deadline is refused at once rather than after the
deadline, and so is any request beyond the queue's maximum depth. "Before
it" is the fair order's, not the queue's length: the classes above, its own
tenant's backlog, and of every other tenant only what that tenant starts
before it would. Counting the whole queue would refuse a light tenant
whenever a heavy one had filled the queue up to the deadline, which is
starvation by another road.
A request the order would admit at once (nothing before it waits, an
engine has room) is never refused early: a rate measured on small requests
would otherwise turn a large one away from an idle engine for good.

*Retry-After.* A refused client is told when what the order admits before it
will have been admitted, at the measured rate (the fleet's: every engine
admits from the one queue). Clients refused together must not all come back together, so each
refusal also books its own tokens' worth of drain time after the previous
booking: returning clients arrive spread out at the rate the queue drains,
and an honoured Retry-After mostly leads to admission. Bookings are kept per
tenant, so one tenant's refusals cannot push everyone else's Retry-After up.
"""

from dataclasses import dataclass

from app.admission.fairqueue import FairQueue, Waiter


@dataclass(frozen=True)
class QueuePlace:
    """Where a queued request stands: 1 is next in the order; ``eta_s`` is
    when it should be admitted (None: nothing to tell it by yet)."""

    position: int
    eta_s: float | None


class DrainRate:
    """Tokens admitted per second out of a backlog, decayed over time."""

    HALF_LIFE = 30.0
    MIN_SECONDS = 2.0

    def __init__(self) -> None:
        self.tokens = 0.0
        self.seconds = 0.0
        self._backlog_since: float | None = None

    def tick(self, now: float, backlog: bool) -> None:
        """Call after every change, with whether requests are waiting now."""
        if self._backlog_since is not None:
            elapsed = max(0.0, now - self._backlog_since)
            decay = 0.5 ** (elapsed / self.HALF_LIFE)
            self.tokens *= decay
            self.seconds = self.seconds * decay + elapsed
        self._backlog_since = now if backlog else None

    def admitted(self, tokens: int) -> None:
        if self._backlog_since is not None:
            self.tokens += tokens

    def rate(self) -> float | None:
        if self.seconds < self.MIN_SECONDS or self.tokens <= 0:
            return None
        return self.tokens / self.seconds


class Forecast:
    def __init__(self, queue: FairQueue, *, max_retry_after: float, cold_turnover: float):
        self._queue = queue
        self._max_retry_after = max_retry_after
        self._cold_turnover = cold_turnover
        self.drain = DrainRate()
        # Per tenant: when the last client it was told to come back returns.
        self._promised: dict[str, float] = {}

    def rate(self) -> float | None:
        """Tokens (worst case) admitted per second out of a backlog."""
        return self.drain.rate()

    def wait(self, priority: str, tokens: int = 0, tenant: str | None = None) -> float | None:
        """Seconds until what the order admits before a new request of
        ``tenant`` at ``priority`` (plus its own ``tokens``) should have been
        admitted; None without a measured rate."""
        rate = self.drain.rate()
        if rate is None:
            return None
        return (self._queue.tokens_ahead(priority, tenant) + tokens) / rate

    def place(self, waiter: Waiter, capacity_tokens: int | None) -> QueuePlace:
        """Where a queued ``waiter`` stands, and when what the order admits
        before it, plus its own tokens, should have been admitted: at the
        measured drain rate, or (not measured yet) with the fleet's cache
        ``capacity_tokens`` turned over every ``cold_turnover`` seconds."""
        count, ahead = self._queue.ahead_of(waiter)
        rate = self.drain.rate()
        if rate is None and capacity_tokens:
            rate = capacity_tokens / self._cold_turnover
        eta = None if rate is None else (ahead + waiter.tokens) / rate
        return QueuePlace(count + 1, eta)

    def retry_after(
        self,
        now: float,
        capacity_tokens: int | None,
        tokens: int = 0,
        tenant: str = "",
        priority: str | None = None,
    ) -> float:
        """Seconds a refused request of ``tokens`` should wait before coming
        back; books that time for ``tenant``. Until the drain rate has been
        measured (the backlog just formed), the fleet (``capacity_tokens``)
        is assumed to turn its KV cache over every ``cold_turnover`` seconds."""
        rate = self.drain.rate()
        if rate is None:
            if capacity_tokens is None:
                return self._cold_turnover
            rate = capacity_tokens / self._cold_turnover
        queue = self._queue
        ahead = queue.tokens if priority is None else queue.tokens_ahead(priority, tenant)
        queue_drained = now + ahead / rate
        come_back = max(queue_drained, self._promised.get(tenant, 0.0)) + tokens / rate
        come_back = min(come_back, now + self._max_retry_after)
        self._promised[tenant] = come_back
        for stale in [t for t, until in self._promised.items() if until < now]:
            del self._promised[stale]
        return max(1.0, come_back - now)
