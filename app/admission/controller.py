"""Admission control in the running gateway: the policy, fed with live facts.

The controller turns a checked request into a KV demand, puts it through the
policy's queue, and wakes it when it is admitted. It feeds the policy the
engine's capacity and preemption counter (from the engine monitor's reads of
``/metrics``) and what completed requests actually used.
"""

import asyncio
import time

from app.admission.demand import Demand, demand_of, refuse_if_it_can_never_fit
from app.admission.estimate import PromptTokenEstimator
from app.admission.policy import (
    AdmissionPolicy,
    PolicyConfig,
    QueueFull,
    Reservation,
    Waiter,
)
from app.engine.stats import KV_USAGE, PREEMPTIONS, EngineStats
from app.errors import Draining, OverCapacity
from app.metrics import GatewayMetrics
from app.record import RequestRecord
from app.settings import Settings
from app.validation import CompletionJob


class AdmissionController:
    def __init__(self, settings: Settings, metrics: GatewayMetrics) -> None:
        self.policy = AdmissionPolicy(
            PolicyConfig(
                max_concurrency=settings.max_concurrency,
                max_request_share=settings.max_request_share,
                unknown_capacity_sequences=settings.fallback_max_sequences,
                max_queue_depth=settings.queue_max_depth,
                max_queue_bytes=settings.queue_max_bytes,
                initial_factor=settings.overcommit_initial,
                max_factor=settings.overcommit_max,
                max_wait=settings.queue_timeout,
            )
        )
        self.estimator = PromptTokenEstimator()
        self._metrics = metrics
        self._queue_timeout = settings.queue_timeout
        self._retry_after_unavailable = settings.retry_after_unavailable
        self._fixed_blocks = settings.kv_blocks
        self._fixed_block_size = settings.kv_block_size
        if settings.kv_blocks is not None and settings.kv_block_size is not None:
            self.policy.set_capacity(settings.kv_blocks, settings.kv_block_size)
        self._draining = False
        self._publish()

    # --- the Admission protocol ---------------------------------------------

    async def admit(self, job: CompletionJob, record: RequestRecord) -> "Ticket":
        if self._draining:
            raise self._draining_error()
        policy = self.policy
        cache = None
        if policy.num_blocks is not None and policy.block_size is not None:
            cache = (policy.num_blocks, policy.block_size)
        refuse_if_it_can_never_fit(job, self.estimator, cache)
        demand = demand_of(job, self.estimator)
        now = time.monotonic()
        waiter = Waiter(
            tenant=record.tenant,
            priority=record.priority,
            tokens=demand.tokens,
            arrival=now,
            deadline=now + self._queue_timeout,
            sequences=demand.sequences,
            size=len(job.upstream_body),
        )
        future: asyncio.Future[Reservation] = asyncio.get_running_loop().create_future()
        waiter.handle = future
        try:
            policy.enqueue(waiter, demand.blocks(policy.block_size or 1), now)
        except QueueFull as full:
            raise OverCapacity(
                "the gateway's queue is full; retry after the time given in Retry-After",
                reason="queue_full",
                retry_after=full.retry_after,
            ) from None
        self._dispatch()
        if not future.done():
            await self._wait(waiter, future)
        reservation = future.result()
        self._metrics.queue_wait.observe(time.monotonic() - waiter.arrival)
        return Ticket(self, reservation, job, demand)

    async def _wait(self, waiter: Waiter, future: "asyncio.Future[Reservation]") -> None:
        try:
            # asyncio.wait neither cancels the future on timeout nor when
            # this task is cancelled: both cases are decided below.
            await asyncio.wait({future}, timeout=max(0.0, waiter.deadline - time.monotonic()))
        except BaseException:
            # The client left while queued.
            if not self.policy.remove(waiter) and future.done() and future.exception() is None:
                # Admitted at the moment the client left: hand it straight back.
                self.give_back(future.result())
            self._publish()
            raise
        if not future.done() and self.policy.remove(waiter):
            self._publish()
            raise self._queue_timeout_error(waiter.tokens)

    def start_draining(self) -> None:
        self._draining = True
        for waiter in self.policy.drain_queue():
            future = waiter.handle
            assert isinstance(future, asyncio.Future)
            if not future.done():
                future.set_exception(self._draining_error())
        self._publish()

    # --- engine facts ---------------------------------------------------------

    def on_engine_stats(self, stats: EngineStats) -> None:
        blocks = self._fixed_blocks or stats.num_blocks
        block_size = self._fixed_block_size or stats.block_size
        if blocks and block_size:
            self.policy.set_capacity(blocks, block_size)
        if PREEMPTIONS in stats.missing or KV_USAGE in stats.missing:
            # Blind to preemptions and KV usage: no overcommit to adapt.
            self.policy.hold_at_floor()
        else:
            self.policy.observe_engine(stats.preemptions_total, stats.kv_usage)
        self._dispatch()

    # --- internals --------------------------------------------------------------

    def _dispatch(self) -> None:
        admitted, expired = self.policy.pop_admissible(time.monotonic())
        for waiter, reservation in admitted:
            future = waiter.handle
            assert isinstance(future, asyncio.Future)
            future.set_result(reservation)
        for waiter in expired:
            future = waiter.handle
            assert isinstance(future, asyncio.Future)
            future.set_exception(self._queue_timeout_error(waiter.tokens))
        self._publish()

    def _queue_timeout_error(self, tokens: int) -> OverCapacity:
        return OverCapacity(
            f"waited {self._queue_timeout:g}s in the gateway's queue; retry after the time"
            " given in Retry-After",
            reason="queue_timeout",
            retry_after=self.policy.retry_after(time.monotonic(), tokens),
        )

    def give_back(self, reservation: Reservation, used: tuple[int, int] | None = None) -> None:
        self.policy.release(reservation, used)
        self._dispatch()

    def _draining_error(self) -> Draining:
        return Draining(
            "the gateway is shutting down; retry on another instance",
            retry_after=self._retry_after_unavailable,
        )

    def _publish(self) -> None:
        m, policy = self._metrics, self.policy
        block = policy.block_size or 1
        for priority, depth in policy.queued_by_priority().items():
            m.queue_depth.labels(priority).set(depth)
        m.kv_reserved.set(policy.reserved_blocks * block)
        if policy.capacity_tokens is not None and policy.budget_blocks is not None:
            m.kv_capacity.set(policy.capacity_tokens)
            m.kv_budget.set(policy.budget_blocks * block)


class Ticket:
    """An admitted request's reservation, given back exactly once."""

    def __init__(
        self,
        controller: AdmissionController,
        reservation: Reservation,
        job: CompletionJob,
        demand: Demand,
    ) -> None:
        self._controller = controller
        self.reservation = reservation
        self._job = job
        self._demand = demand

    def release(self, record: RequestRecord) -> None:
        if self.reservation.released:
            return
        used = None
        job = self._job
        if record.outcome == "completed" and record.completion_tokens is not None:
            prompt = (record.prompt_tokens or self._demand.prompt_tokens) * job.n
            used = (prompt, record.completion_tokens)
            (first, *rest) = job.prompts
            if record.prompt_tokens and first.text and not rest:
                self._controller.estimator.observe(job.route, len(first.text), record.prompt_tokens)
        self._controller.give_back(self.reservation, used)
