"""What admission shows on ``/metrics``: the queue's depth, each engine's
reservations, budget and sequence cap, and where requests were routed and
why. The gauges are written from the policy's state whenever the registry
is collected (``app.observe.on_collect``) — never kept apart from it, and costing a
request nothing; the counters as each request is routed."""

from app.admission.budget import Reservation
from app.admission.policy import AdmissionPolicy
from app.engine.monitor import engine_label
from app.observe.metrics import GatewayMetrics


class AdmissionMetrics:
    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics

    def queue_wait(self, seconds: float) -> None:
        self._metrics.queue_wait.observe(seconds)

    def publish(self, policy: AdmissionPolicy) -> None:
        """The queue and every engine's budget, as they stand now."""
        m = self._metrics
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

    def routed(self, reservation: Reservation) -> None:
        """Where an admitted request went, and what the router's choice was
        (its prefix's engine, a fallback, a wait, the load cap overriding)."""
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
