"""Admission's end of the lane (``app.relay.lane``): what follows from what a
request in flight tells it.

- *opened*: its engine answered after so long (what a refill takes to get
  there: ``app.admission.intake``); a stream's gauge is kept on its
  reservation, where admission samples it — when its place is due to be
  handed on (``app.admission.refill``), where a paced start stands
  (``app.admission.pace``);
- *ended*: a completed stream's tokens and events (what an event carries)
  and its span (how fast its engine writes: ``app.admission.itl``);
- *on_evict*: what stops the request, should a higher class need its room.

The reservation is the request's state in admission; this object only
routes to it, so every learning feature is a listener of these three calls.
"""

import time
from collections.abc import Callable

from app.admission.budget import Reservation, RunningStream
from app.admission.pace import Progress
from app.admission.policy import AdmissionPolicy
from app.admission.refill import tokens_sent
from app.relay.lane import StreamGauge
from app.request.errors import GatewayError


class KvLane:
    def __init__(self, policy: AdmissionPolicy, reservation: Reservation, most_ahead: float):
        self._policy = policy
        self._reservation = reservation
        self._most_ahead = most_ahead

    def opened(self, travel: float, gauge: StreamGauge | None) -> None:
        reservation, policy = self._reservation, self._policy
        if gauge is None or reservation.released:
            return
        handing_on = policy.opened(reservation, travel, self._most_ahead)
        reservation.stream = RunningStream(gauge, handing_on)
        if reservation.paced is not None:
            reservation.paced.progress = _progress(gauge, handing_on.tokens_per_event)

    def ended(self, tokens: int, events: int, seconds: float) -> None:
        self._policy.streamed(self._reservation, tokens, events)
        budget = self._policy.engines.get(self._reservation.engine)
        if budget is not None:
            budget.itl.learn(tokens, seconds)

    def on_evict(self, stop: Callable[[GatewayError], None]) -> None:
        self._reservation.stop = stop


def _progress(gauge: StreamGauge, per_event: Callable[[], float]) -> Progress:
    """How far a stream has come: its tokens, and the seconds since its
    first (None before it)."""

    def progress() -> tuple[float, float] | None:
        first = gauge.first_token_at
        if first is None:
            return None
        return tokens_sent(gauge, per_event()), time.perf_counter() - first

    return progress
