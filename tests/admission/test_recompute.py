"""What preemption costs an engine, estimated from its counters
(``app.admission.recompute``)."""

import pytest

from app.admission.recompute import EngineReading, RecomputeWindow


def test_each_preemption_recomputes_what_a_running_sequence_holds_on_average() -> None:
    window = RecomputeWindow(window=3)
    # 10 sequences hold half of 2,000 tokens: 100 each.
    for preempted, generated in ((0, 0), (2, 500), (2, 1000), (5, 1500)):
        window.observe(EngineReading(preempted, generated, 0.5, 2000, 10))
    assert window.share() == pytest.approx((2 * 100 + 3 * 100) / 1500)
    assert window.recomputed_total == pytest.approx(500)
    assert window.last_preempted


def test_the_share_is_over_the_last_readings_only() -> None:
    window = RecomputeWindow(window=2)
    window.observe(EngineReading(0, 0, 0.5, 2000, 10))
    window.observe(EngineReading(10, 100, 0.5, 2000, 10))
    for i in range(2, 4):
        window.observe(EngineReading(10, 100 * i, 0.5, 2000, 10))
    assert window.share() == 0
    assert not window.last_preempted


def test_an_engine_that_does_not_count_its_tokens_has_no_share() -> None:
    window = RecomputeWindow()
    window.observe(EngineReading(0, None, 0.5, 2000, 10))
    window.observe(EngineReading(3, None, 0.5, 2000, 10))
    assert window.share() is None
    # Its preemptions are still seen (a budget of none backs off on them).
    assert window.last_preempted
