"""How long a refill takes to reach an engine, and so how long before its end
a stream hands its place on (``app.admission.refill``, *Handing on*). No I/O;
the time is given.

An engine's API server takes requests in one after another: it parses,
renders and tokenizes each before its scheduler sees it. A request admitted
alone arrives after one request's intake; a batch's places handed on
together send their successors at once, and the last of them arrives after
the whole batch's intake. So the intake is measured per request — a
stream's travel (from admission to its engine's answer's head) over the
requests admitted to the engine just before it, within that travel, and
itself — and a stream hands on ``MARGIN`` times the intake of the places
that will be handed on with it: the engine's admissions within
``COHORT_SECONDS`` of its own (streams admitted together with the same
``max_tokens`` end together).

The same number of requests takes longer into an engine running a full
batch than into an idle one (docs/benchmarks.md, the first turnover), and a
stream's travel is measured on the first: ``MARGIN`` covers the difference;
the caller's bound (``refill_ahead_seconds``) caps
it. Where streams admitted together do not end together, the count
overstates and a stream hands on earlier, never beyond that bound.
"""

from bisect import bisect_left, bisect_right

# A stream hands on this many times its batch's measured intake before its end.
MARGIN = 3.0
# The weight of a new measurement in the per-request intake's running mean.
ALPHA = 0.1
# Streams admitted within this many seconds of each other count as handed
# on together.
COHORT_SECONDS = 3.0
# Admissions older than this are forgotten: a stream that checks its end
# later than this after its admission counts fewer with it, and hands on
# later (its end is as likely to be its own).
FORGET_SECONDS = 4 * COHORT_SECONDS
# At most this many admissions are remembered (a bound on memory, far above
# what an engine admits within the window).
MAX_REMEMBERED = 65_536
# Forgotten admissions are dropped this many at a time at least.
FORGET_SLICE = 256


class Intake:
    def __init__(self) -> None:
        # Admission times on the engine, in order (the policy's clock).
        self._admitted: list[float] = []
        # Seconds of one request's intake (a running mean; None until measured).
        self.per_request: float | None = None
        # A stream's whole travel, as measured (a running mean, for /status).
        self.travel: float | None = None

    def admitted(self, now: float) -> None:
        """A request was admitted to the engine at ``now``."""
        admitted = self._admitted
        admitted.append(now)
        # Forgotten in slices: a list bisects in constant time per probe.
        old = bisect_left(admitted, now - FORGET_SECONDS)
        if old >= FORGET_SLICE or len(admitted) > MAX_REMEMBERED:
            del admitted[: max(old, len(admitted) - MAX_REMEMBERED)]

    @property
    def remembered(self) -> int:
        """Admissions remembered (for the bound on them)."""
        return len(self._admitted)

    def travelled(self, seconds: float, admitted_at: float) -> None:
        """A stream admitted at ``admitted_at`` had its engine's answer's
        head ``seconds`` later: one request's intake is that over itself and
        those admitted to the engine within that time before it."""
        before = self._between(admitted_at - seconds, admitted_at, right=False)
        per_request = seconds / (before + 1)
        last = self.per_request
        self.per_request = per_request if last is None else last + ALPHA * (per_request - last)
        travel = self.travel
        self.travel = seconds if travel is None else travel + ALPHA * (seconds - travel)

    def together(self, admitted_at: float) -> int:
        """The engine's admissions within ``COHORT_SECONDS`` of
        ``admitted_at``, itself included: the places handed on with it."""
        return max(1, self._between(admitted_at - COHORT_SECONDS, admitted_at + COHORT_SECONDS))

    def ahead(self, most: float, admitted_at: float) -> float:
        """How long before its end a stream admitted at ``admitted_at`` hands
        its place on: ``MARGIN`` times the intake of the places handed on
        with it, at most ``most`` (nothing before an intake is measured)."""
        per_request = self.per_request
        if per_request is None:
            return 0.0
        return min(most, MARGIN * per_request * self.together(admitted_at))

    def _between(self, start: float, end: float, *, right: bool = True) -> int:
        """Admissions from ``start`` up to ``end`` (``end`` itself only if
        ``right``)."""
        admitted = self._admitted
        stop = bisect_right(admitted, end) if right else bisect_left(admitted, end)
        return max(0, stop - bisect_left(admitted, start))
