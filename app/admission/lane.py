"""Admission's end of the lane (``app.relay.lane``): what follows from what a
request in flight tells it.

- *opened*: its engine answered; a stream's gauge is kept on its
  reservation, where admission samples it when it needs to know how far the
  stream has come (where a paced start stands: ``app.admission.pace``; when
  it will end: ``app.admission.eviction``);
- *ended*: a completed stream's tokens, events and span teach its engine's
  estimates (``app.admission.itl``), and a paced start its life;
- *on_evict*: what stops the request, should a higher class need its room.

The reservation is the request's state in admission; this object only
routes to it, so every learning feature is a listener of these three calls.
"""

import time
from collections.abc import Callable

from app.admission.budget import Reservation
from app.admission.itl import InterTokenEstimate
from app.admission.pace import Progress
from app.admission.policy import AdmissionPolicy
from app.relay.lane import StreamGauge
from app.request.errors import GatewayError


class KvLane:
    def __init__(self, policy: AdmissionPolicy, reservation: Reservation):
        self._policy = policy
        self._reservation = reservation

    def opened(self, gauge: StreamGauge | None) -> None:
        reservation = self._reservation
        budget = self._policy.engines.get(reservation.engine)
        if gauge is None or reservation.released or budget is None:
            return
        reservation.stream = gauge
        if reservation.paced is not None:
            reservation.paced.progress = _progress(gauge, budget.itl)

    def ended(self, tokens: int, events: int, seconds: float) -> None:
        reservation = self._reservation
        budget = self._policy.engines.get(reservation.engine)
        if budget is None:
            return
        budget.itl.learn(tokens, events, seconds)
        if reservation.paced is not None:
            budget.pace.completed(reservation.paced, tokens)

    def on_evict(self, stop: Callable[[GatewayError], None]) -> None:
        self._reservation.stop = stop


def _progress(gauge: StreamGauge, itl: InterTokenEstimate) -> Progress:
    """How far a stream has come: its tokens, and the seconds since its
    first (None before it)."""

    def progress() -> tuple[float, float] | None:
        first = gauge.first_token_at
        if first is None:
            return None
        return itl.tokens_sent(gauge), time.perf_counter() - first

    return progress
