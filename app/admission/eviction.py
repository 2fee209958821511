"""Making room for a higher class: which running request is stopped, and
when. No I/O, no clock.

vLLM under ``--scheduling-policy priority`` runs its waiting queue in the
order of the classes, and preempts the least important running request when
a running one needs a block — but a waiting request never stops a running
one. When the engine's sequences are full of lower-class work, a higher
class waits for one of them to end; only the gateway can stop one for it.

So the head of the order, blocked, has a running request stopped for it
(``evicted``) when all of these hold:

- it would miss its objective: no request running where it could go is
  forecast to end within the time it has left (each stream's tokens left at
  its engine's inter-token time, ``app.admission.itl``; a request whose end
  cannot be forecast is not counted on);
- a running request of a lower, sheddable class there, whose room would let
  it in, exists: the newest such one is stopped (it has done the least work);
- it had no request stopped for it before (once per request), and the engine
  has not had ``per_second`` stopped within the last second.

Whether an eviction did what it was for — the engine's running count did not
grow and the blocked request started there — is the controller's to confirm
at the engine's next report (``app.admission.controller``).
"""

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from app.admission.budget import EngineBudget, Reservation
from app.admission.fairqueue import Waiter


@dataclass(frozen=True)
class Eviction:
    """``victim`` stopped at ``at`` so that ``waiter`` may start on its engine."""

    victim: Reservation
    waiter: Waiter
    engine: str
    at: float


class Evictor:
    def __init__(self, per_second: float) -> None:
        self._per_second = per_second
        # Per engine, when its last evictions were made.
        self._recent: dict[str, deque[float]] = {}

    def consider(
        self, waiter: Waiter, budgets: Iterable[EngineBudget], left: float, now: float
    ) -> Eviction | None:
        """An eviction for ``waiter``, blocked with ``left`` seconds to be
        admitted in, on the engines it may go to (``budgets``), or None."""
        if waiter.evicted_for or self._per_second <= 0:
            return None
        usable = [b for b in budgets if _may_take(b, waiter)]
        if any(_ends_within(b, left) for b in usable):
            return None
        choices = []
        for budget in usable:
            victim = _newest_victim(budget, waiter, now)
            if victim is not None and self._allowed(budget.id, now):
                choices.append(victim)
        if not choices:
            return None
        victim = max(choices, key=lambda r: r.admitted_at)
        victim.evicted = True
        waiter.evicted_for = True
        self._recent.setdefault(victim.engine, deque()).append(now)
        return Eviction(victim, waiter, victim.engine, now)

    def _allowed(self, engine: str, now: float) -> bool:
        recent = self._recent.setdefault(engine, deque())
        while recent and recent[0] <= now - 1.0:
            recent.popleft()
        return len(recent) < self._per_second


def _may_take(budget: EngineBudget, waiter: Waiter) -> bool:
    """Whether ``waiter`` may go to ``budget``'s engine at all."""
    if not budget.up or waiter.model not in budget.models or budget.id in waiter.excluded:
        return False
    return waiter.pinned is None or waiter.pinned == budget.id


def _ends_within(budget: EngineBudget, seconds: float) -> bool:
    """Whether a request running there is forecast to end within ``seconds``."""
    for reservation in budget.live.values():
        stream = reservation.stream
        if stream is None or reservation.bound <= 0 or stream.first_token_at is None:
            continue
        left = reservation.bound - budget.itl.tokens_sent(stream)
        end = budget.itl.time_for(left)
        if end is not None and end <= seconds:
            return True
    return False


def _newest_victim(budget: EngineBudget, waiter: Waiter, now: float) -> Reservation | None:
    """The newest running request on ``budget``'s engine of a sheddable
    class below ``waiter``'s whose room would let it in."""
    for reservation in reversed(budget.live.values()):
        if (
            reservation.sheddable
            and reservation.rank > waiter.rank
            and not reservation.evicted
            and reservation.stop is not None
            and budget.fits_without(waiter, reservation, now)
        ):
            return reservation
    return None


@dataclass
class _Check:
    eviction: Eviction
    # The sequences the gateways held running on the engine when it was
    # made (the victim's among them); None: not known.
    running_before: float | None
    # Where the request it was made for was admitted, once it was.
    admitted_to: str | None = None
    # That request has left the queue (admitted, expired or gone): a paced
    # start may admit it a report after the room appeared.
    settled: bool = False


class EvictionChecks:
    """Whether each eviction made the room it was for: at the first report
    of its engine after the stopped request gave its room back, the engine
    runs no more than the gateways held there when it was made (the stopped
    one's place went to the blocked request, not on top of it) and the
    blocked request was admitted there. Otherwise it was wasted."""

    def __init__(self) -> None:
        self._open: list[_Check] = []

    def watch(self, eviction: Eviction, running_before: float | None) -> None:
        self._open.append(_Check(eviction, running_before))

    def admitted(self, waiter: Waiter, engine: str) -> None:
        for check in self._open:
            if check.eviction.waiter is waiter:
                check.admitted_to = engine
                check.settled = True

    def left(self, waiter: Waiter) -> None:
        """``waiter`` left the queue, admitted or not."""
        for check in self._open:
            if check.eviction.waiter is waiter:
                check.settled = True

    def report(self, engine: str, running: float) -> list[str]:
        """``engine`` reported ``running`` requests: the outcome of each of
        its evictions whose stopped request has given its room back and
        whose blocked request has left the queue."""
        outcomes, still = [], []
        for check in self._open:
            eviction = check.eviction
            if eviction.engine != engine or not eviction.victim.released or not check.settled:
                still.append(check)
                continue
            before = check.running_before
            made_room = before is None or running <= before
            outcomes.append("confirmed" if made_room and check.admitted_to == engine else "wasted")
        self._open = still
        return outcomes
