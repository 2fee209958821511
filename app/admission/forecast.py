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
new request refused for a wait of minutes. So a backlog measures nothing
until it has turned over: until as many requests have been admitted out of
it as it ever found in flight. Each admission out of it follows a request
ending, so by then the requests running when it formed have, in number, all
been replaced, and the measure spans a whole request's life whether they
started together or staggered. A count needs no request duration and no
clock at a release; a rule in time would need a duration learned from
finished requests, and at a typical one only about half of a burst that
started together has ended. So before any request has ended there is no
early refusal at all, and on a fresh gateway none until a first backlog has
turned over: until then the deadline (``queue_timeout``) and the queue's
depth bound the wait. A measure stands for the next backlog until that one
has turned over in its turn.

A backlog's first turnover counts from the first request to end in it, not
from its start: before that nothing could drain. Where starts are paced
(``app.admission.pace``) this matters: admissions are then also made into
room the cache's future leaves, not one for each end, so the turnover's
count is reached with the whole first life inside its span, and the first
backlog reads as a drain slow enough to refuse users whom the engine serves
within the deadline direct.
Counted from the first end, requests that end together read fast for their
first turnover (a wave's admissions over the wave's width): fewer refusals,
never more, until the next turnover measures a whole life.

*Over which span.* The rate is that of the last turnover: the tokens of the
last as-many-admissions-as-in-flight, over the seconds of backlog from the
admission before them (for a backlog's first turnover, from its start) to
the last. Requests that started together end together, so a backlog drains
in waves a request's length apart; a measure over all of a backlog's time,
or decayed over it, counts the time into the current gap before the wave
that ends it, and reads the engine slower between two waves than it is. A
turnover's span is one request's life at any point of the wave, and
predicts those waits closely.

*Refusing only when sure.* Even so a forecast is refused on only when its
predicted wait is past the deadline by more than a fifth (``SURE``). A
request predicted to wait about the deadline may well be admitted within it,
and refusing it turns away work the engine would have served in time; a
client that comes back at once meets the same forecast again, so a queue
held at the deadline's edge refuses the same users over and over while the
engine's slots wait for them. Queued instead, a request whose wait does run
past the deadline is refused then (``queue_timeout``), as it would be
without a forecast.

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

from collections import deque
from dataclasses import dataclass

from app.admission.fairqueue import FairQueue, Waiter

# How far past the deadline a predicted wait must be before it refuses.
SURE = 1.2


@dataclass(frozen=True)
class QueuePlace:
    """Where a queued request stands: 1 is next in the order; ``eta_s`` is
    when it should be admitted (None: nothing to tell it by yet)."""

    position: int
    eta_s: float | None


class DrainRate:
    """Tokens admitted per second of backlog over the last turnover: as many
    admissions out of a backlog as the most requests in flight it found,
    from the one before them (or from the backlog's start, for its first
    turnover) to the last."""

    # Admissions kept: a turnover of more (a fleet's thousands of
    # sequences in one replica) is measured over this many.
    KEEP = 16_384

    def __init__(self) -> None:
        # Seconds of backlog so far (idle time does not count), and the last
        # tick while there was a backlog (None: none now).
        self._clock = 0.0
        self._since: float | None = None
        # Each admission out of a backlog: the clock then, and the tokens
        # admitted so far (a running sum: a window's tokens in one subtraction).
        self._admissions: deque[tuple[float, float]] = deque(maxlen=self.KEEP)
        self._admitted = 0.0
        # The current backlog: where it started, its admissions, and a
        # turnover (the most requests in flight it found).
        self._start = (0.0, 0.0)
        self._count = 0
        self._turnover = 1
        self._ended = False
        # The last complete measure: it stays for the next backlog until
        # that one has turned over.
        self._rate: float | None = None

    def tick(self, now: float, backlog: bool, in_flight: int) -> None:
        """Call after every change, with whether requests are waiting now and
        how many are in flight."""
        if self._since is not None:
            self._clock += max(0.0, now - self._since)
        elif backlog:
            # A new backlog: its first turnover is measured from here.
            self._start = (self._clock, self._admitted)
            self._count = 0
            self._turnover = 1
            self._ended = False
        self._since = now if backlog else None
        if backlog:
            self._turnover = max(self._turnover, in_flight)

    def ended(self) -> None:
        """A request in flight ended: the first to in a backlog starts the
        measure of its first turnover."""
        if self._since is not None and not self._ended:
            self._ended = True
            if self._count < self._turnover:
                self._start = (self._clock, self._admitted)
                self._count = 0

    def admitted(self, tokens: int) -> None:
        """A request of ``tokens`` admitted out of the backlog."""
        self._admitted += tokens
        self._admissions.append((self._clock, self._admitted))
        self._count += 1
        window = min(self._turnover, self.KEEP - 1)
        if self._count < window:
            return  # not turned over yet: the last measure stands
        if self._count > window:
            since, before = self._admissions[-1 - window]
        else:
            since, before = self._start
        if self._clock > since:
            self._rate = (self._admitted - before) / (self._clock - since)

    def rate(self) -> float | None:
        return self._rate


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

    def outwaits(self, wait: float) -> bool:
        """Whether a predicted ``wait`` is surely past the deadline."""
        return wait > self._max_wait * SURE

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
