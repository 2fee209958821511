"""Admission across gateway replicas: one KV budget per engine and one fair
order for the whole fleet, through the state in Redis.

Each replica keeps its own queue and decides in its own order, but a request
is only admitted once Redis has held it: the hold is one atomic script that
adds the request to what this replica holds on the engine only if the
holdings of every live replica leave room in the engine's budget and
sequence cap — two replicas deciding at the same instant cannot both take
the last blocks. The answer also brings the fleet's totals, so a refused
decision is made again with the fresh view (another engine, or none). The
tenant is charged on the fleet's fair-share clock in the same script, and
each heartbeat brings back the clocks of the tenants queued here, so a
tenant that sends ten times the load through two replicas is served as one
tenant, not two.

Redis down: every replica falls back to its share of each engine — the
budget and cap divided by the number of replicas last seen alive — and
decides alone; the heartbeat that finds Redis again writes what each
replica holds and sharing resumes.
"""

import asyncio
import logging
from collections.abc import Callable
from contextlib import suppress
from typing import Literal

from redis.exceptions import RedisError

from app.admission.budget import EngineBudget, Reservation
from app.admission.policy import AdmissionPolicy, Decision
from app.engine.monitor import engine_label
from app.observe.metrics import GatewayMetrics
from app.request.identity import PRIORITIES
from app.state.fleet import FleetState, Holding

log = logging.getLogger("gateway.admission")

HoldAnswer = Literal["held", "again", "wait"]


class SharedBudgets:
    def __init__(self, fleet: FleetState, policy: AdmissionPolicy, metrics: GatewayMetrics):
        self._fleet = fleet
        self._policy = policy
        self._metrics = metrics
        # A heartbeat writes what this replica holds over the mirror in
        # Redis; it must not run while a hold is out (the hold's blocks are in
        # Redis, not yet committed here). The dispatcher commits a hold before
        # it next yields, so holding this lock for the call is enough.
        self._lock = asyncio.Lock()
        fleet.on_change(self._on_change)
        self._on_view: list[Callable[[], None]] = []
        self._clock: tuple[str, str, float, float] | None = None
        self._waiting: dict[str, list[str]] = {}

    @property
    def up(self) -> bool:
        return self._fleet.up

    async def hold(self, decision: Decision) -> HoldAnswer:
        """Hold the decided request in Redis. "held": admit it; "again": the
        fleet's view changed (no room on that engine, or a tenant queued
        here starts earlier on the fleet's clock than this one): decide
        again; "wait": another replica's waiter goes first. With Redis down,
        the decision (made on this replica's share) stands."""
        if not self._fleet.up:
            return "held"
        budget, waiter = decision.budget, decision.waiter
        blocks, sequences = budget.charged(waiter)
        queue = self._policy.queue
        try:
            async with self._lock:
                held = await self._fleet.hold(
                    budget.id,
                    (blocks, sequences, 1),
                    (budget.budget_blocks, budget.max_sequences),
                    (waiter.priority, waiter.tenant, waiter.tokens),
                    queue.queued_tenants().get(waiter.priority, ()),
                )
        except RedisError:
            return "held"
        if held.not_my_turn:
            # It is admitted there; this queue is looked at again shortly.
            return "wait"
        if held.starts is not None:
            # This replica's copy of the clocks lagged what the others
            # admitted: take the fleet's, and the order picks another head.
            queue.set_starts(waiter.priority, held.starts, held.vtime)
            return "again"
        self._see(budget, (held.blocks, held.sequences, held.requests))
        if not held.ok:
            return "again"
        self._clock = (waiter.priority, waiter.tenant, held.served, held.vtime)
        return "held"

    def committed(self) -> None:
        """The held request was admitted here (its tenant charged on this
        replica's clock): take the fleet's clock for it where it is ahead.
        Synced only now — before the local charge, the two would add up."""
        if self._clock is not None:
            priority, tenant, served, vtime = self._clock
            self._policy.queue.sync_clocks(priority, {tenant: served}, vtime)
            self._clock = None

    def publish_waiting(self) -> None:
        """Tell the fleet which tenants wait here, where that changed."""
        waiting = {p: sorted(t) for p, t in self._policy.queue.queued_tenants().items()}
        every: dict[str, list[str]] = {p: waiting.get(p, []) for p in PRIORITIES}
        changed = {p: t for p, t in every.items() if self._waiting.get(p) != t}
        if changed and self._fleet.up:
            self._fleet.publish_waiting(changed)
            self._waiting = every

    def release(self, reservation: Reservation) -> None:
        if self._fleet.up:
            self._fleet.release(reservation.engine, (reservation.blocks, reservation.sequences, 1))

    async def beat(self) -> None:
        """Renew this replica's lease and write what it holds; read the
        fleet's totals and the queued tenants' clocks."""
        budgets = self._policy.engines
        async with self._lock:
            holdings = {e: b.holding() for e, b in budgets.items()}
            totals = await self._fleet.heartbeat(holdings)
        for engine, total in totals.items():
            if engine in budgets:
                self._see(budgets[engine], total)
        clocks = await self._fleet.clocks(self._policy.queue.queued_tenants())
        for priority, (served, vtime) in clocks.items():
            self._policy.queue.sync_clocks(priority, served, vtime)
        for listener in self._on_view:
            listener()

    async def refresh(self) -> None:
        """A heartbeat now (a queue waits on what other replicas hold)."""
        if self._fleet.up:
            with suppress(RedisError, OSError, TimeoutError):
                async with asyncio.timeout(self._fleet.timeout):
                    await self.beat()

    def on_view(self, listener: Callable[[], None]) -> None:
        """Told after each heartbeat (other replicas may have freed room)."""
        self._on_view.append(listener)

    def _see(self, budget: EngineBudget, total: Holding) -> None:
        """The fleet holds ``total`` on the engine: the rest is the others'."""
        mine = budget.holding()
        budget.others_blocks = max(0, total[0] - mine[0])
        budget.others_sequences = max(0, total[1] - mine[1])
        budget.others_in_flight = max(0, total[2] - mine[2])
        block = budget.block_size or 1
        self._metrics.fleet_kv_reserved.labels(engine_label(budget.id)).set(total[0] * block)

    def _on_change(self, up: bool) -> None:
        self._waiting = {}  # published again from scratch
        share = 1.0 if up else 1.0 / self._fleet.replicas
        for budget in self._policy.engines.values():
            budget.share = share
            if not up:
                budget.others_blocks = budget.others_sequences = budget.others_in_flight = 0
