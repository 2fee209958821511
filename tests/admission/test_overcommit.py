"""How far an engine's budget overcommits it (``app.admission.overcommit``):
backing off on preemption, opening up within the preemption budget."""

import pytest

from app.admission.budget import BudgetConfig
from app.admission.overcommit import Overcommit
from app.admission.recompute import EngineReading


def reading(
    preemptions: float, kv_usage: float, generated: float | None = None, running: float = 1
) -> EngineReading:
    return EngineReading(preemptions, generated, kv_usage, 10_000, running)


def overcommit(**config: float) -> Overcommit:
    return Overcommit(BudgetConfig(**config))  # type: ignore[arg-type]


def test_preemptions_shrink_the_factor_down_to_the_floor() -> None:
    b = overcommit(initial_factor=2.0, backoff=0.7, preemption_budget=0)
    b.observe(reading(0, 0.5), queued=True, ceiling=4.0)
    b.observe(reading(3, 0.99), queued=True, ceiling=4.0)
    assert b.factor == pytest.approx(1.4)
    b.observe(reading(5, 0.99), queued=True, ceiling=4.0)
    assert b.factor == pytest.approx(0.98)
    for i in range(20):
        b.observe(reading(100 + i, 0.99), queued=True, ceiling=4.0)
    assert b.factor == pytest.approx(0.9)


def test_within_its_preemption_budget_the_engine_is_filled_past_the_zero_preemption_ceiling() -> (
    None
):
    """A tenth of what the engine generates may be recomputed: preemptions
    that cost less keep the factor growing (the cache full, requests queued)
    past what completed requests justify; past the budget it backs off."""
    b = overcommit(preemption_budget=0.1, patience=2, step=0.2, max_factor=3.0)
    generated = preempted = 0.0
    for _ in range(20):
        # 1,000 tokens a tick; a preemption recomputes 10,000 × 0.99 / 100 tokens.
        generated, preempted = generated + 1000, preempted + 0.5
        b.observe(reading(preempted, 0.99, generated, running=100), queued=True, ceiling=1.0)
    assert b.window.share() == pytest.approx(0.0495)
    assert b.factor == pytest.approx(3.0)
    for _ in range(3):
        generated, preempted = generated + 1000, preempted + 3
        b.observe(reading(preempted, 0.99, generated, running=100), queued=True, ceiling=1.0)
    assert b.factor < 3.0


def test_without_a_preemption_budget_any_preemption_backs_off() -> None:
    b = overcommit(initial_factor=2.0, backoff=0.5, preemption_budget=0)
    b.observe(reading(0, 0.5, 0), queued=True, ceiling=4.0)
    b.observe(reading(1, 0.5, 100_000), queued=True, ceiling=4.0)
    assert b.factor == pytest.approx(1.0)


def test_no_headroom_or_no_queue_means_no_growth() -> None:
    b = overcommit(preemption_budget=0)
    for _ in range(10):
        b.observe(reading(0, 0.2), queued=False, ceiling=4.0)
        b.observe(reading(0, 0.95), queued=True, ceiling=4.0)
    assert b.factor == 1.0


def test_blind_to_the_engine_the_factor_holds_at_its_floor() -> None:
    b = overcommit(initial_factor=2.0)
    b.hold_at_floor()
    assert b.factor == pytest.approx(0.9)
