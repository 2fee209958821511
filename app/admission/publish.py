"""What admission shows: on ``/metrics`` the queue's depth, each engine's
reservations, budget and sequence cap, and where requests were routed and
why; on ``/status`` each engine's budget. The gauges are written from the
policy's state whenever the registry is collected
(``app.observe.on_collect``) — never kept apart from it, and costing a
request nothing; the counters as each request is routed."""

from typing import Any

from app.admission.budget import EngineBudget, Reservation
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
        cold = policy.cold
        if cold.models:
            m.cold_starts.publish(cold.models, cold.held(policy.queue))
        for budget in policy.engines.values():
            label = engine_label(budget.id)
            block = budget.block_size or 1
            m.kv_reserved.labels(label).set(budget.reserved_blocks * block)
            m.engine_in_flight.labels(label).set(budget.in_flight)
            m.engine_sequence_cap.labels(label).set(budget.max_sequences)
            share = budget.recompute.share()
            if share is not None:
                m.recompute_share.labels(label).set(share)
            if budget.capacity_tokens is not None and budget.budget_blocks is not None:
                m.kv_capacity.labels(label).set(budget.capacity_tokens)
                m.kv_budget.labels(label).set(budget.budget_blocks * block)

    def cold_start(self, model: str, seconds: float) -> None:
        """An engine came up for ``model`` that held requests waited for."""
        self._metrics.cold_starts.started.labels(model).observe(seconds)

    def evicted(self, engine: str, outcome: str) -> None:
        """An eviction's outcome, once its engine reported after it."""
        self._metrics.evictions.labels(engine_label(engine), outcome).inc()

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


def budget_status(budget: EngineBudget) -> dict[str, Any]:
    """What an operator reads of this budget (``/status``), in tokens."""
    block = budget.block_size or 1
    blocks = budget.budget_blocks
    return {
        "capacity_tokens": budget.capacity_tokens,
        "budget_tokens": None if blocks is None else blocks * block,
        "overcommit": round(budget.factor, 3),
        "reserved_tokens": budget.reserved_blocks * block,
        "other_replicas_reserved_tokens": budget.others_blocks * block,
        "share": round(budget.share, 3),
        "learned_sequence_cap": budget.sequence_cap,
        "tokens_per_event": round(budget.itl.tokens_per_event, 3),
        "paced_step_seconds": budget.pace.step() if budget.pace.open else None,
        "inter_token_seconds": budget.itl.seconds_per_token,
        "recompute_share": budget.recompute.share(),
        "preemption_budget": budget.config.preemption_budget,
        "max_sequences": budget.max_sequences,
        "in_flight": budget.in_flight,
        "running_sequences": budget.running_sequences,
    }


def cold_status(policy: AdmissionPolicy) -> dict[str, Any] | None:
    """Scale from zero on ``/status``: the requests held for an engine by
    model, and the last starts' seconds (None: no cold models)."""
    cold = policy.cold
    if not cold.models:
        return None
    held = cold.held(policy.queue)
    return {
        "timeout_seconds": cold.timeout,
        "models": {
            model: {"held": held.get(model, 0), "serving": policy.serves(model)}
            for model in sorted(cold.models)
        },
        "last_starts_seconds": cold.last_starts(),
    }
