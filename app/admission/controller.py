"""Admission control in the running gateway: the policy, fed with live facts.

The controller puts a request through the policy's queue and wakes it when
it is admitted to an engine. It hands the policy each engine's view (up or
not, the models it serves: the pool's, read, not copied), feeds it each
engine's facts (capacity, preemptions, KV usage, its own queue, from the
engine monitors' reads of ``/metrics``) and what completed requests actually
used, and looks again when an engine's state changes.
"""

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from app.admission.base import AdmissionRequest
from app.admission.budget import BudgetConfig
from app.admission.demand import refuse_if_it_can_never_fit
from app.admission.estimate import PromptTokenEstimator
from app.admission.policy import (
    AdmissionPolicy,
    PolicyConfig,
    QueueFull,
    QueuePlace,
    Reservation,
    Waiter,
)
from app.admission.shared import SharedBudgets
from app.engine.monitor import engine_label
from app.engine.stats import KV_USAGE, PREEMPTIONS, EngineStats
from app.engine.view import EngineView
from app.errors import Draining, OverCapacity
from app.metrics import GatewayMetrics
from app.record import RequestRecord
from app.routing.block_index import block_chain
from app.routing.prefix_key import CHUNK_CHARS, prefix_chain
from app.routing.router import Router
from app.settings import Settings
from app.state.fleet import FleetState
from app.state.redis import raise_if_cancelled
from app.validation import CompletionJob

# How often a replica with requests waiting re-reads the fleet's holdings.
_LOOK_AGAIN = 0.1
# How much of a prompt's prefix is tracked for prefix-aware demand (pieces of
# CHUNK_CHARS characters: 64 × 256 = 16k characters, a few thousand tokens;
# or, for a prompt of known token ids, of PIECE_TOKENS tokens).
PREFIX_PIECES = 64
PIECE_TOKENS = 64


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
            prefix_aware=settings.prefix_aware_demand,
            unknown_capacity_sequences=settings.fallback_max_sequences,
            initial_factor=settings.overcommit_initial,
            max_factor=settings.overcommit_max,
        )
        self.policy = AdmissionPolicy(
            PolicyConfig(
                budget=budget,
                max_queue_depth=settings.queue_max_depth,
                max_queue_bytes=settings.queue_max_bytes,
                max_wait=settings.queue_timeout,
                affinity_wait=settings.routing_affinity_wait,
            ),
            router,
        )
        self.estimator = estimator
        self._metrics = metrics
        self._queue_timeout = settings.queue_timeout
        self._retry_after_unavailable = settings.retry_after_unavailable
        self._fixed_blocks = settings.kv_blocks
        self._fixed_block_size = settings.kv_block_size
        self._draining = False
        # The queued requests by engine request id (their place, asked by
        # a stream that reports it).
        self._queued: dict[str, Waiter] = {}
        self._shared = None if fleet is None else SharedBudgets(fleet, self.policy, metrics)
        self._kick = asyncio.Event()
        # A look at the queue when the first request waiting for its
        # prefix's engine may stop waiting (nothing else may happen then).
        self._wait_timer: asyncio.TimerHandle | None = None
        if self._shared is not None:
            self._shared.on_view(self._kick.set)
        self._publish()

    @property
    def shared(self) -> "SharedBudgets | None":
        return self._shared

    # --- the Admission protocol ---------------------------------------------

    async def admit(
        self,
        request: AdmissionRequest,
        record: RequestRecord,
        excluded: Iterable[str] = (),
    ) -> "KvHold":
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
        waiter = Waiter(
            tenant=request.identity.tenant,
            priority=request.identity.priority,
            tokens=demand.tokens,
            arrival=now,
            deadline=now + self._queue_timeout,
            sequences=demand.sequences,
            seq_tokens=tuple(t for t in demand.seq_tokens for _ in range(job.n)),
            model=job.model,
            excluded=frozenset(excluded),
            affinity=request.affinity,
            pinned=request.pinned,
            prefix=prefix_pieces(job, self.estimator),
            prompt=request.prompt,
            size=len(job.upstream_body),
        )
        future: asyncio.Future[Reservation] = asyncio.get_running_loop().create_future()
        waiter.handle = future
        try:
            policy.enqueue(waiter, now, front=bool(waiter.excluded))
        except QueueFull as full:
            raise OverCapacity(
                f"{full.message}; retry after the time given in Retry-After",
                reason=full.reason,
                retry_after=full.retry_after,
            ) from None
        self._queued[record.engine_request_id] = waiter
        try:
            self._dispatch()
            if not future.done():
                await self._wait(waiter, future)
        finally:
            del self._queued[record.engine_request_id]
        reservation = future.result()
        self._metrics.queue_wait.observe(time.monotonic() - waiter.arrival)
        self._count_route(reservation)
        return KvHold(self, reservation, request)

    def _count_route(self, reservation: Reservation) -> None:
        m, choice = self._metrics, reservation.choice
        m.engine_routed.labels(engine_label(reservation.engine)).inc()
        if choice is not None and choice.fallback is not None:
            m.kv_fallbacks.labels(choice.fallback).inc()
        if choice is not None and choice.waited_for is not None:
            m.affinity_waits.labels(engine_label(choice.waited_for)).inc()
        if choice is None or choice.preferred is None:
            return
        if choice.engine == choice.preferred:
            m.affinity_hits.labels(engine_label(choice.engine)).inc()
        elif choice.overridden:
            m.load_cap_overrides.labels(engine_label(choice.preferred)).inc()

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
            raise self._queue_timeout_error(waiter)

    def place(self, request_id: str) -> QueuePlace | None:
        waiter = self._queued.get(request_id)
        return None if waiter is None else self.policy.place(waiter)

    def start_draining(self) -> None:
        self._draining = True
        for waiter in self.policy.drain_queue():
            future = waiter.handle
            assert isinstance(future, asyncio.Future)
            if not future.done():
                future.set_exception(self._draining_error())
        self._publish()

    def status(self) -> dict[str, Any]:
        queue = self.policy.queue
        return {
            "admission": "on",
            "queue": {
                "depth": len(queue),
                "by_priority": queue.depth_by_priority(),
                "by_tenant": queue.depth_by_tenant(),
            },
            "engines": {url: budget.status() for url, budget in self.policy.engines.items()},
        }

    # --- engine facts ---------------------------------------------------------

    def add_engine(self, view: EngineView) -> None:
        self.policy.add_engine(view)
        self._dispatch()

    def on_engine_change(self, engine: str) -> None:
        self._dispatch()

    def on_engine_stats(self, engine: str, stats: EngineStats) -> None:
        budget = self.policy.engine(engine)
        blocks = self._fixed_blocks or stats.num_blocks
        block_size = self._fixed_block_size or stats.block_size or (16 if blocks else None)
        if blocks and block_size:
            budget.set_capacity(blocks, block_size)
        if PREEMPTIONS in stats.missing or KV_USAGE in stats.missing:
            # Blind to preemptions and KV usage: no overcommit to adapt.
            budget.hold_at_floor()
        else:
            self.policy.observe_engine(engine, stats.preemptions_total, stats.kv_usage)
            budget.observe_queue(stats.running, stats.waiting, stats.kv_usage)
        self._dispatch()

    def forget_engine(self, engine: str) -> None:
        self.policy.forget_engine(engine)
        self._publish()

    # --- internals --------------------------------------------------------------

    def _dispatch(self) -> None:
        if self._shared is not None:
            # Admissions wait for Redis: the dispatcher task makes them.
            self._kick.set()
            return
        admitted, expired = self.policy.pop_admissible(time.monotonic())
        for waiter, reservation in admitted:
            self._wake(waiter, reservation)
        self._expire(expired)
        self._look_when_a_wait_ends()
        self._publish()

    def _look_when_a_wait_ends(self) -> None:
        if self._wait_timer is not None:
            self._wait_timer.cancel()
            self._wait_timer = None
        ends = self.policy.wait_ends
        if ends is not None:
            delay = max(0.0, ends - time.monotonic())
            self._wait_timer = asyncio.get_running_loop().call_later(delay, self._dispatch)

    async def run(self) -> None:
        """With shared state: admit in order, each admission held in Redis
        first (``SharedBudgets``). A refused hold is decided again with the
        fleet's fresh totals."""
        shared = self._shared
        assert shared is not None
        while True:
            raise_if_cancelled()
            # While requests wait on what other replicas hold, look again
            # often: their releases are not announced.
            waiting = self.policy.queued > 0 and shared.up
            try:
                async with asyncio.timeout(_LOOK_AGAIN if waiting else None):
                    await self._kick.wait()
            except TimeoutError:
                await shared.refresh()
            self._kick.clear()
            passed: set[Waiter] = set()
            for _ in range(10_000):
                decision, expired = self.policy.decide(time.monotonic(), passed)
                self._expire(expired)
                if decision is None:
                    break
                answer = await shared.hold(decision)
                if answer == "wait":
                    # Another replica's head goes first: asking again at
                    # once would only spin on Redis until it is admitted.
                    break
                if answer == "again":
                    continue
                if not self.policy.still_queued(decision.waiter):
                    # The client left while Redis answered.
                    budget = decision.budget
                    shared.release(Reservation(budget.id, 0, *budget.charged(decision.waiter)))
                    continue
                self._wake(decision.waiter, self.policy.commit(decision))
                shared.committed()
            shared.publish_waiting()
            self._publish()

    def _wake(self, waiter: Waiter, reservation: Reservation) -> None:
        future = waiter.handle
        assert isinstance(future, asyncio.Future)
        future.set_result(reservation)

    def _expire(self, expired: list[Waiter]) -> None:
        for waiter in expired:
            future = waiter.handle
            assert isinstance(future, asyncio.Future)
            future.set_exception(self._queue_timeout_error(waiter))

    def _queue_timeout_error(self, waiter: Waiter) -> OverCapacity:
        return OverCapacity(
            f"waited {self._queue_timeout:g}s in the gateway's queue; retry after the time"
            " given in Retry-After",
            reason="queue_timeout",
            retry_after=self.policy.retry_after(
                time.monotonic(), waiter.tokens, waiter.tenant, waiter.priority
            ),
        )

    def give_back(self, reservation: Reservation, used: tuple[int, int] | None = None) -> None:
        if self.policy.release(reservation, used) and self._shared is not None:
            self._shared.release(reservation)
        self._dispatch()

    def _draining_error(self) -> Draining:
        return Draining(
            "the gateway is shutting down; retry on another instance",
            retry_after=self._retry_after_unavailable,
        )

    def _publish(self) -> None:
        m, policy = self._metrics, self.policy
        for priority, depth in policy.queue.depth_by_priority().items():
            m.queue_depth.labels(priority).set(depth)
        for budget in policy.engines.values():
            label = engine_label(budget.id)
            block = budget.block_size or 1
            m.kv_reserved.labels(label).set(budget.reserved_blocks * block)
            m.engine_in_flight.labels(label).set(budget.in_flight)
            m.engine_sequence_cap.labels(label).set(budget.max_sequences)
            if budget.capacity_tokens is not None and budget.budget_blocks is not None:
                m.kv_capacity.labels(label).set(budget.capacity_tokens)
                m.kv_budget.labels(label).set(budget.budget_blocks * block)


class KvHold:
    """An admitted request's reservation on one engine, given back exactly once."""

    def __init__(
        self, controller: AdmissionController, reservation: Reservation, request: AdmissionRequest
    ) -> None:
        self._controller = controller
        self.reservation = reservation
        self._request = request

    @property
    def engine(self) -> str:
        return self.reservation.engine

    def release(self, record: RequestRecord) -> None:
        if self.reservation.released:
            return
        used = None
        if record.outcome == "completed" and record.completion_tokens is not None:
            request = self._request
            prompt = (record.prompt_tokens or request.demand.prompt_tokens) * request.job.n
            used = (prompt, record.completion_tokens)
        self._controller.give_back(self.reservation, used)


def prefix_pieces(
    job: CompletionJob, estimator: PromptTokenEstimator
) -> tuple[tuple[int, int], ...]:
    """The first prompt's prefix pieces (prefix-aware demand), with the
    tokens up to the end of each: counted, for a prompt whose token ids are
    known; else estimated from its text."""
    ids = job.prompts[0].ids
    if ids:
        chain = block_chain(ids, PIECE_TOKENS, job.cache_salt, PREFIX_PIECES)
        return tuple((piece, (i + 1) * PIECE_TOKENS) for i, piece in enumerate(chain))
    text = job.prompts[0].text
    chain = prefix_chain(text, PREFIX_PIECES, job.cache_salt)
    return tuple(
        (piece, estimator.estimate(job.route, (i + 1) * CHUNK_CHARS))
        for i, piece in enumerate(chain)
    )
