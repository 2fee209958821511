"""Admission control in the running gateway: the policy, fed with live facts.

The controller puts a request through the policy's queue and wakes it when
it is admitted to an engine. It hands the policy each engine's view (up or
not, the models it serves: the pool's, read, not copied), feeds it each
engine's facts (capacity, preemptions, KV usage, its own queue, from the
engine monitors' reads of ``/metrics``) and what completed requests actually
used, and has the queue looked at again when anything changes. Who makes
the admissions — this replica alone, or through Redis with the rest of the
fleet — is its dispatcher's business (``app.admission.dispatch``).
"""

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from app.admission.base import AdmissionRequest
from app.admission.budget import BudgetConfig
from app.admission.classes import classes_of, objective_of
from app.admission.demand import refuse_if_it_can_never_fit
from app.admission.dispatch import Dispatch, LocalDispatch, SharedDispatch
from app.admission.estimate import PromptTokenEstimator
from app.admission.eviction import Eviction, EvictionChecks
from app.admission.hold import KvHold
from app.admission.lane import KvLane
from app.admission.policy import (
    AdmissionPolicy,
    PolicyConfig,
    QueueFull,
    QueuePlace,
    Reservation,
    Waiter,
)
from app.admission.publish import AdmissionMetrics, budget_status, cold_status
from app.admission.recompute import EngineReading
from app.admission.shared import SharedBudgets
from app.engine.cold_models import parse_cold_models
from app.engine.stats import KV_USAGE, PREEMPTIONS, EngineStats
from app.engine.view import EngineView
from app.observe.metrics import GatewayMetrics
from app.request.errors import ColdStartTimeout, Draining, Evicted, OverCapacity
from app.request.record import RequestRecord
from app.routing.router import Router
from app.settings import Settings
from app.state.fleet import FleetState


class AdmissionController:
    def __init__(
        self,
        settings: Settings,
        metrics: GatewayMetrics,
        estimator: PromptTokenEstimator,
        router: Router,
        fleet: FleetState | None = None,
    ) -> None:
        budget = BudgetConfig(
            max_sequences=settings.max_concurrency,
            max_request_share=settings.max_request_share,
            # Paced starts need every start on the engine in sight: with
            # shared state, the other replicas' are not.
            paced_starts=settings.paced_starts and fleet is None,
            by_priority=settings.engine_scheduling == "priority",
            prefix_aware=settings.prefix_aware_demand,
            unknown_capacity_sequences=settings.fallback_max_sequences,
            initial_factor=settings.overcommit_initial,
            max_factor=settings.overcommit_max,
            preemption_budget=settings.preemption_budget,
        )
        self.policy = AdmissionPolicy(
            PolicyConfig(
                budget=budget,
                classes=classes_of(settings),
                max_queue_depth=settings.queue_max_depth,
                max_queue_bytes=settings.queue_max_bytes,
                max_wait=settings.queue_timeout,
                affinity_wait=settings.routing_affinity_wait,
                affinity_steal=settings.routing_affinity_steal,
                evictions_per_second=settings.evictions_per_second,
                cold_models=frozenset(parse_cold_models(settings.cold_models)),
                cold_start_timeout=settings.cold_start_timeout,
            ),
            router,
        )
        self.estimator = estimator
        self._metrics = AdmissionMetrics(metrics)
        self._retry_after_unavailable = settings.retry_after_unavailable
        self._fixed_blocks = settings.kv_blocks
        self._fixed_block_size = settings.kv_block_size
        self._draining = False
        # The queued requests: by engine request id (their place, asked by a
        # stream that reports it), and what wakes each.
        self._queued: dict[str, Waiter] = {}
        self._futures: dict[Waiter, asyncio.Future[Reservation]] = {}
        # Evictions awaiting their engine's next report.
        self._checks = EvictionChecks()
        self._shared = None if fleet is None else SharedBudgets(fleet, self.policy, metrics)
        self._dispatch: Dispatch
        if self._shared is None:
            self._dispatch = LocalDispatch(self.policy, self._wake, self._expire, self._evict)
        else:
            self._dispatch = SharedDispatch(
                self.policy, self._shared, self._wake, self._expire, self._evict
            )
        # The gauges are written from the policy when scraped (``app.observe.on_collect``).
        metrics.on_collect(self._publish)
        metrics.cold_starts.known(self.policy.cold.models)

    @property
    def shared(self) -> "SharedBudgets | None":
        return self._shared

    async def run(self) -> None:
        """The dispatcher's background work (with shared state: the
        admissions, each held in Redis first; in process, paced starts as
        they come due)."""
        await self._dispatch.run()

    # --- the Admission protocol ---------------------------------------------

    async def admit(
        self,
        request: AdmissionRequest,
        record: RequestRecord,
        excluded: Iterable[str] = (),
    ) -> KvHold:
        """Wait until the request is admitted to an engine. ``excluded``: a
        retry, which goes to the front of its queue and avoids those engines."""
        if self._draining:
            raise self._draining_error()
        policy, job, demand = self.policy, request.job, request.demand
        caches = [
            (b.usable_blocks, b.block_size)
            for b in policy.engines.values()
            if b.usable_blocks and b.block_size and job.model in b.models
        ]
        refuse_if_it_can_never_fit(job, self.estimator, caches)
        now = time.monotonic()
        identity = request.identity
        objective = objective_of(policy.config.classes, identity.priority, identity.objective)
        # The objective counts from its arrival at the gateway, not from here.
        since = max(0.0, time.perf_counter() - record.arrival)
        waiter = Waiter(
            tenant=identity.tenant,
            priority=identity.priority,
            tokens=demand.tokens,
            arrival=now,
            deadline=now - since + objective,
            objective=objective,
            sequences=demand.sequences,
            seq_tokens=tuple(t for t in demand.seq_tokens for _ in range(job.n)),
            output=job.max_tokens or 0,
            model=job.model,
            excluded=frozenset(excluded),
            affinity=request.keys.affinity,
            pinned=request.pinned,
            prefix=request.keys.pieces,
            prompt=request.keys.blocks,
            size=len(job.upstream_body),
        )
        try:
            future = self.enqueue(waiter, front=bool(waiter.excluded))
        except QueueFull as full:
            raise OverCapacity(
                f"{full.message}; retry after the time given in Retry-After",
                reason=full.reason,
                retry_after=full.retry_after,
            ) from None
        self._queued[record.engine_request_id] = waiter
        try:
            self._dispatch.dispatch()
            if not future.done():
                await self._wait(waiter, future)
        finally:
            del self._queued[record.engine_request_id]
            self._futures.pop(waiter, None)
            self._checks.left(waiter)
        reservation = future.result()
        self._metrics.queue_wait(time.monotonic() - waiter.arrival)
        self._metrics.routed(reservation)
        lane = KvLane(self.policy, reservation)
        return KvHold(self.give_back, reservation, request, lane, self.policy.first_token)

    def enqueue(self, waiter: Waiter, *, front: bool = False) -> "asyncio.Future[Reservation]":
        """Queue ``waiter`` (the policy may refuse it: ``QueueFull``); the
        future is done when it is admitted, expired or drained."""
        future: asyncio.Future[Reservation] = asyncio.get_running_loop().create_future()
        pushed = self.policy.enqueue(waiter, waiter.arrival, front=front)
        self._futures[waiter] = future
        for out in pushed:
            theirs = self._futures.get(out.waiter)
            if theirs is not None and not theirs.done():
                theirs.set_exception(
                    OverCapacity(
                        "the gateway's queue is full and this request gave its place to one of"
                        " a tenant queuing less or of a higher class; retry after the time given"
                        " in Retry-After",
                        reason="queue_full",
                        retry_after=out.retry_after,
                    )
                )
        return future

    async def _wait(self, waiter: Waiter, future: "asyncio.Future[Reservation]") -> None:
        try:
            # asyncio.wait neither cancels the future on timeout nor when
            # this task is cancelled: both cases are decided below. The
            # time left is read again when it ends: a cold start's budget
            # restarts when the pool changes, and the objective counts
            # again, later, once an engine is up (``app.admission.cold``).
            while not future.done():
                left = self.policy.time_left(waiter, time.monotonic())
                if left <= 0:
                    break
                await asyncio.wait({future}, timeout=left)
        except BaseException:
            # The client left while queued.
            if not self.policy.remove(waiter) and future.done() and future.exception() is None:
                # Admitted at the moment the client left: hand it straight back.
                self.give_back(future.result())
            raise
        if not future.done() and self.policy.remove(waiter):
            raise self._expired_error(waiter)

    @property
    def queued(self) -> int:
        return self.policy.queued

    def place(self, request_id: str) -> QueuePlace | None:
        waiter = self._queued.get(request_id)
        return None if waiter is None else self.policy.place(waiter)

    def start_draining(self) -> None:
        self._draining = True
        for waiter in self.policy.drain_queue():
            future = self._futures.get(waiter)
            if future is not None and not future.done():
                future.set_exception(self._draining_error())

    def status(self) -> dict[str, Any]:
        queue = self.policy.queue
        return {
            "admission": "on",
            "queue": {
                "depth": len(queue),
                "by_priority": queue.depth_by_priority(),
                "by_tenant": queue.depth_by_tenant(),
            },
            "engines": {url: budget_status(budget) for url, budget in self.policy.engines.items()},
            "cold_start": cold_status(self.policy),
        }

    # --- engine facts ---------------------------------------------------------

    def add_engine(self, view: EngineView) -> None:
        self.policy.add_engine(view)
        self._pool_changed()

    def on_engine_change(self, engine: str) -> None:
        self._pool_changed()

    def _pool_changed(self) -> None:
        self.policy.pool_changed(time.monotonic())
        for model, took in self.policy.cold.take_measured():
            self._metrics.cold_start(model, took)
        self._dispatch.dispatch()

    def on_engine_stats(self, engine: str, stats: EngineStats) -> None:
        budget = self.policy.engine(engine)
        if stats.counts_seen:
            for outcome in self._checks.report(engine, stats.running):
                self._metrics.evicted(engine, outcome)
        blocks = self._fixed_blocks or stats.num_blocks
        block_size = self._fixed_block_size or stats.block_size or (16 if blocks else None)
        if blocks and block_size:
            budget.set_capacity(blocks, block_size)
        if PREEMPTIONS in stats.missing or KV_USAGE in stats.missing:
            # Blind to preemptions and KV usage: no overcommit to adapt.
            budget.hold_at_floor()
        else:
            reading = EngineReading(
                preemptions_total=stats.preemptions_total,
                generated_total=stats.generated_total,
                kv_usage=stats.kv_usage,
                capacity_tokens=budget.capacity_tokens,
                running=stats.running,
            )
            self.policy.observe_engine(engine, reading)
            if stats.counts_seen:
                # Requests waiting for a LoRA slot say nothing of the
                # engine's sequence cap: only those waiting for room do.
                budget.observe_queue(stats.running, stats.waiting_for_capacity, stats.kv_usage)
        self._dispatch.dispatch()

    def forget_engine(self, engine: str) -> None:
        self.policy.forget_engine(engine)
        self._pool_changed()

    # --- what the dispatcher and the holds call back ----------------------------

    def give_back(self, reservation: Reservation, used: tuple[int, int] | None = None) -> None:
        if self.policy.release(reservation, used):
            self._dispatch.released(reservation)
        self._dispatch.dispatch()

    def _wake(self, waiter: Waiter, reservation: Reservation) -> None:
        self._checks.admitted(waiter, reservation.engine)
        # Only a queued waiter is admitted, and every queued waiter's future
        # is pending: one that was drained or expired left the queue then.
        self._futures[waiter].set_result(reservation)

    def _expire(self, expired: list[Waiter]) -> None:
        for waiter in expired:
            future = self._futures.get(waiter)
            if future is not None and not future.done():
                future.set_exception(self._expired_error(waiter))

    def _evict(self, evictions: list[Eviction]) -> None:
        """Stop each request evicted for a higher class: its client is told
        when to come back; whether it made the room is confirmed at its
        engine's next report."""
        now = time.monotonic()
        for eviction in evictions:
            victim = eviction.victim
            if victim.stop is None or victim.released:
                continue
            told = self.policy.retry_after(now, victim.tokens)
            # What the gateways hold running there now, the victim among
            # them: a report can be older than the victim's own start.
            budget = self.policy.engine(eviction.engine)
            self._checks.watch(eviction, budget.running_sequences + budget.others_sequences)
            victim.stop(
                Evicted(
                    "stopped to make room for a request of a higher class; retry after the"
                    " time given",
                    retry_after=told,
                )
            )

    def _expired_error(self, waiter: Waiter) -> OverCapacity | ColdStartTimeout:
        if waiter.held_from is not None:
            timeout = self.policy.cold.timeout
            return ColdStartTimeout(
                f"no engine for {waiter.model!r} came up within {timeout:g}s; retry after the"
                " time given in Retry-After",
                retry_after=self.policy.cold.retry_after(
                    waiter.model, time.monotonic(), self._retry_after_unavailable
                ),
            )
        return OverCapacity(
            f"not started within its objective of {waiter.objective:g}s in the gateway's"
            " queue; retry after the time given in Retry-After",
            reason="objective_expired",
            retry_after=self.policy.retry_after(
                time.monotonic(), waiter.tokens, waiter.tenant, waiter.priority
            ),
        )

    def _draining_error(self) -> Draining:
        return Draining(
            "the gateway is shutting down; retry on another instance",
            retry_after=self._retry_after_unavailable,
        )

    def _publish(self) -> None:
        self._metrics.publish(self.policy)
