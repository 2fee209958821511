"""The load cap (``app.routing.load_cap``) on its own: the fair share,
the factor over it, the slack at low load. Pure."""

import pytest

from app.routing.base import EngineLoad
from app.routing.load_cap import LoadCap


def fleet(*loads: int) -> list[EngineLoad]:
    return [EngineLoad(id=f"e{i}", in_flight=n, weight=100.0) for i, n in enumerate(loads)]


def test_an_engine_takes_requests_up_to_the_factor_times_its_fair_share() -> None:
    # 8 in flight over 2 engines: with the next one, a fair share of 4.5,
    # a cap of ceil(1.25 × 4.5) = 6.
    cap = LoadCap(1.25, slack=0)
    assert cap.under(fleet(5, 3)[0], fleet(5, 3))
    assert not cap.under(fleet(6, 2)[0], fleet(6, 2))


def test_at_low_load_the_slack_lets_a_prefix_stay_together() -> None:
    idle = fleet(2, 0, 0)
    assert not LoadCap(1.25, slack=0).under(idle[0], idle)
    assert LoadCap(1.25, slack=2).under(idle[0], idle)


def test_a_factor_below_1_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        LoadCap(0.9)
