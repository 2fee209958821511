"""How admissions are made: one dispatcher per mode, behind one interface.

*In process* (``LocalDispatch``): the policy decides and admits at once, in
the task that changed something (an arrival, a release, an engine's tick).

*Shared* (``SharedDispatch``, several replicas through Redis): an admission
is only made once Redis has held it (``app.admission.shared``), so a
background task makes them, in order, each after its hold; a change only
wakes that task. While requests wait on what other replicas hold it looks
again often, since their releases are not announced.

Either way the controller is told whom to wake (``Wake``), who waited
past its objective (``Expire``) and what running request to stop for a
higher class (``Evict``).
"""

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from app.admission.budget import Reservation
from app.admission.eviction import Eviction
from app.admission.fairqueue import Waiter
from app.admission.policy import AdmissionPolicy
from app.admission.shared import SharedBudgets
from app.state.redis import raise_if_cancelled

Wake = Callable[[Waiter, Reservation], None]
Expire = Callable[[list[Waiter]], None]
Evict = Callable[[list[Eviction]], None]

# How often a replica with requests waiting re-reads the fleet's holdings.
_LOOK_AGAIN = 0.1
# At most this many decisions in one shared round (a bound on one wake-up).
_ROUND = 10_000
# How often a paced start that is due but does not fit yet is looked at
# again (streams write meanwhile; ``app.admission.pace``).
_PACE_LOOK = 0.01


class Dispatch(Protocol):
    def dispatch(self) -> None:
        """Something changed: admit what now may be (or have it admitted)."""

    def released(self, reservation: Reservation) -> None:
        """A reservation was given back here."""

    async def run(self) -> None:
        """The background work this mode needs, if any (until cancelled)."""


class LocalDispatch:
    def __init__(self, policy: AdmissionPolicy, wake: Wake, expire: Expire, evict: Evict) -> None:
        self._policy = policy
        self._wake = wake
        self._expire = expire
        self._evict = evict
        self._kick = asyncio.Event()

    def dispatch(self) -> None:
        self._kick.set()
        admitted, expired = self._policy.pop_admissible(time.monotonic())
        for waiter, reservation in admitted:
            self._wake(waiter, reservation)
        self._expire(expired)
        self._evict(self._policy.take_evictions())

    def released(self, reservation: Reservation) -> None:
        return None  # the policy's budget is the only one

    async def run(self) -> None:
        """Admissions are made by whoever changed something, but a paced
        start (``app.admission.pace``) comes due with time: this wakes for
        it while requests wait on one."""
        while True:
            self._kick.clear()
            wake = self._policy.paced_wake(time.monotonic())
            if wake is None:
                await self._kick.wait()
                continue
            await asyncio.sleep(max(wake, _PACE_LOOK if wake == 0 else 0.0))
            self.dispatch()


class SharedDispatch:
    def __init__(
        self,
        policy: AdmissionPolicy,
        shared: SharedBudgets,
        wake: Wake,
        expire: Expire,
        evict: Evict,
    ) -> None:
        self._policy = policy
        self._shared = shared
        self._wake = wake
        self._expire = expire
        self._evict = evict
        self._kick = asyncio.Event()
        shared.on_view(self._kick.set)

    def dispatch(self) -> None:
        # Admissions wait for Redis: the task in ``run`` makes them.
        self._kick.set()

    def released(self, reservation: Reservation) -> None:
        self._shared.release(reservation)

    async def run(self) -> None:
        """Admit in order, each admission held in Redis first. A refused
        hold is decided again with the fleet's fresh totals."""
        policy, shared = self._policy, self._shared
        while True:
            raise_if_cancelled()
            waiting = policy.queued > 0 and shared.up
            try:
                async with asyncio.timeout(_LOOK_AGAIN if waiting else None):
                    await self._kick.wait()
            except TimeoutError:
                await shared.refresh()
            self._kick.clear()
            await self._round()
            self._evict(policy.take_evictions())
            shared.publish_waiting()

    async def _round(self) -> None:
        policy, shared = self._policy, self._shared
        passed: set[Waiter] = set()
        for _ in range(_ROUND):
            decision, expired = policy.decide(time.monotonic(), passed)
            self._expire(expired)
            if decision is None:
                return
            answer = await shared.hold(decision)
            if answer == "wait":
                # Another replica's head goes first: asking again at once
                # would only spin on Redis until it is admitted.
                return
            if answer == "again":
                continue
            if not policy.still_queued(decision.waiter):
                # The client left while Redis answered.
                budget = decision.budget
                shared.release(Reservation(budget.id, 0, *budget.charged(decision.waiter)))
                continue
            self._wake(decision.waiter, policy.commit(decision))
            shared.committed()
