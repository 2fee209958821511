"""When a request will be admitted: how fast the queue drains, the wait that
predicts, and the Retry-After a refused client is told. No I/O, no clock.

*Refusing early.* The queue drains at a rate the policy measures: tokens
admitted out of a backlog per second of backlog (idle time does not count, so
a quiet spell does not make the engine look slow). A new request whose
predicted wait — the tokens the order admits before it, over that rate — is
longer than the queue's deadline is refused at once rather than after the
deadline (reason ``queue_forecast``; a refusal for the queue's depth or
bytes is ``queue_full``). "Before it" is the fair order's, not the queue's
length: the classes above, its own tenant's backlog, and of every other
tenant only what that tenant starts before it would. Counting the whole
queue would refuse a light tenant whenever a heavy one had filled the queue
up to the deadline, which is starvation by another road.
A request the order would admit at once (nothing before it waits, an
engine has room) is never refused early: a rate measured on small requests
would otherwise turn a large one away from an idle engine for good.

*When the rate is measured.* A backlog drains only as the requests in flight
end, and how fast they end at first says when they started, not how fast the
engine works: a burst on a fresh gateway starts a full engine's requests
together, none of them ends for a whole request's length, and the first few
that do would stand for an engine a hundred times slower than it is — every
new request refused for a wait of minutes. So a backlog's measure counts
only once the backlog has turned over: once as many requests have been
admitted out of it as it ever found in flight. Each admission out of it
follows a request ending, so by then the requests running when it formed
have, in number, all been replaced, and the measure spans a whole
request's life whether they started together or staggered. This is the
simplest rule that holds for both: a rule in time would need a request's
duration, learned from finished requests, and at a typical one only about
half of a burst that started together has ended (the rate still half the
truth); a count needs no duration, and no clock at a release. Until then
the backlog's measure is held aside; a backlog that ends before it turns
over measured nothing (it drained within a request's life: no wait worth
refusing for). So before any request has ended there is no early refusal
at all, and on a fresh gateway none until a first backlog has turned over:
until then the deadline (``queue_timeout``) and the queue's depth bound the
wait. Once measured, the rate stays, decayed over later backlogs, for the
next burst to be refused early by.

*Retry-After.* A refused client is told when what the order admits before it
will have been admitted, at the measured rate (the fleet's: every engine
admits from the one queue), never later than the queue's deadline: the
gateway never keeps a request waiting longer than that, and a promise
further out rests on a rate that may well have changed by then. Clients refused
together must not all come back together, so each refusal also books its
own tokens' worth of drain time after the previous booking: returning
clients arrive spread out at the rate the queue drains, and an honoured
Retry-After mostly leads to admission. Bookings are kept per tenant, so one
tenant's refusals cannot push everyone else's Retry-After up.

A client refused for its predicted wait is told to come back half its
deadline before it should be admitted, not when: its wait is longer than
the deadline, so the whole of it would always be capped to the deadline and
say nothing, and a client back only when all before it was admitted has
lost its place to whoever came meanwhile. Queued any time in the last
deadline before its admission it would be admitted within its deadline;
back at the start of that span the forecast, asked again, predicts exactly
the deadline and refuses it at the slightest slowdown, so it is told the
middle. A request whose own tokens take longer than the deadline to drain
is only admitted by finding room at once, so it is told the whole wait.
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
    """Tokens admitted per second out of backlogs that turned over, decayed
    over time."""

    HALF_LIFE = 30.0
    MIN_SECONDS = 2.0

    def __init__(self) -> None:
        # What counts: backlogs once they turned over.
        self.tokens = 0.0
        self.seconds = 0.0
        # The current backlog (``_since``: its last tick; None: none): what it
        # admitted over how long, held aside until it turned over, that is
        # until its admissions reach the most requests it found in flight.
        self._since: float | None = None
        self._tokens = 0.0
        self._seconds = 0.0
        self._admissions = 0
        self._running = 0
        self._turned_over = False

    def tick(self, now: float, backlog: bool, in_flight: int) -> None:
        """Call after every change, with whether requests are waiting now and
        how many are in flight."""
        if self._since is not None:
            elapsed = max(0.0, now - self._since)
            decay = 0.5 ** (elapsed / self.HALF_LIFE)
            self.tokens *= decay
            self.seconds *= decay
            self._tokens *= decay
            self._seconds = self._seconds * decay + elapsed
            self._settle()
        if not backlog:
            # Gone before it turned over: what it measured is dropped.
            self._since = None
            self._tokens = self._seconds = 0.0
            self._admissions = self._running = 0
            self._turned_over = False
            return
        self._since = now
        if not self._turned_over:
            self._running = max(self._running, in_flight)

    def admitted(self, tokens: int) -> None:
        """A request of ``tokens`` admitted out of the backlog."""
        if self._since is not None:
            self._tokens += tokens
            self._admissions += 1
            self._settle()

    def _settle(self) -> None:
        self._turned_over = self._turned_over or self._admissions >= max(1, self._running)
        if self._turned_over:
            self.tokens += self._tokens
            self.seconds += self._seconds
            self._tokens = self._seconds = 0.0

    def rate(self) -> float | None:
        if self.seconds < self.MIN_SECONDS or self.tokens <= 0:
            return None
        return self.tokens / self.seconds


class Forecast:
    def __init__(
        self,
        queue: FairQueue,
        *,
        max_wait: float,
        max_retry_after: float,
        cold_turnover: float,
    ) -> None:
        self._queue = queue
        self._max_wait = max_wait
        # The longest Retry-After: the deadline's, or less if configured so.
        self._cap = min(max_retry_after, max_wait)
        self._cold_turnover = cold_turnover
        self.drain = DrainRate()
        # Per tenant: when the last client it was told to come back should
        # be admitted.
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
        *,
        may_queue: bool = False,
    ) -> float:
        """Seconds a refused request of ``tokens`` should wait before coming
        back; books when it should be admitted for ``tenant``. ``may_queue``:
        refused for its predicted wait, it may come back to wait part of its
        deadline queued. Until the drain rate has been measured, the fleet
        (``capacity_tokens``) is assumed to turn its KV cache over every
        ``cold_turnover`` seconds."""
        rate = self.drain.rate()
        if rate is None:
            if capacity_tokens is None:
                return max(1.0, min(self._cold_turnover, self._cap))
            rate = capacity_tokens / self._cold_turnover
        queue = self._queue
        ahead = queue.tokens if priority is None else queue.tokens_ahead(priority, tenant)
        own = tokens / rate
        admitted = max(now + ahead / rate, self._promised.get(tenant, 0.0)) + own
        # How long before its admission it comes back to wait in the queue.
        lead = self._max_wait / 2 if may_queue and own <= self._max_wait else 0.0
        admitted = min(admitted, now + lead + self._cap)
        self._promised[tenant] = admitted
        for stale in [t for t, until in self._promised.items() if until < now]:
            del self._promised[stale]
        return max(1.0, admitted - lead - now)
