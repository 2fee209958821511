"""Heat (``app.routing.heat``): a prefix's share of the recent requests, and
whether the engines holding it can carry it. The table itself, then the
router keeping one: a prefix its holder can carry stays there past the load
cap up to the held bound (moved, it would miss), and so does one held
nowhere at its home; a hot one goes on at the cap; an engine that holds as
much takes the overflow at the cap. Pure, no engines."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.base import Choice, EngineLoad, RouteRequest, Wait
from app.routing.block_index import PromptBlocks
from app.routing.heat import PrefixHeat
from app.routing.homes import Homes
from app.routing.load_cap import LoadCap
from app.routing.router import Router
from app.routing.scorers import PRESETS
from tests.support.routing import Held

PROMPT = PromptBlocks((1, 2, 3, 4))
HOT, COLD = 1, 2


def heat_of(requests: list[int], window: int = 64, trusted: int = 16) -> PrefixHeat:
    heat = PrefixHeat(window=window, trusted=trusted)
    for key in requests:
        heat.observe(key)
    return heat


# Eight documents in turn; a skewed mix: one takes four requests of five.
EIGHT = list(range(10, 18)) * 40
SKEWED = [HOT, HOT, HOT, HOT, COLD] * 60


def test_a_share_is_the_prefix_s_part_of_the_recent_requests() -> None:
    eight = heat_of(EIGHT)
    for key in range(10, 18):
        assert eight.share(key) == pytest.approx(1 / 8, abs=0.02)
    skewed = heat_of(SKEWED)
    assert skewed.share(HOT) == pytest.approx(0.8, abs=0.02)
    assert skewed.share(COLD) == pytest.approx(0.2, abs=0.02)
    assert skewed.share(99) == 0


def test_too_few_requests_give_no_share_and_every_prefix_is_carried() -> None:
    heat = heat_of([HOT] * 15, window=100_000)  # little decay: 16 needed
    assert heat.share(HOT) is None
    assert heat.carried(HOT, holders=1, engines=2)
    heat.observe(HOT)
    heat.observe(HOT)
    assert heat.share(HOT) == pytest.approx(1.0)
    assert not heat.carried(HOT, holders=1, engines=2)


def test_a_prefix_no_longer_asked_for_cools() -> None:
    heat = heat_of([HOT] * 200 + [COLD] * 200)
    assert heat.share(HOT) < 0.05 < 0.95 < heat.share(COLD)  # type: ignore[operator]


def test_carried_while_its_share_is_within_its_holders_share_of_the_fleet() -> None:
    eight, skewed = heat_of(EIGHT), heat_of(SKEWED)
    assert eight.carried(10, holders=1, engines=2)
    assert eight.carried(10, holders=1, engines=8)
    assert not eight.carried(10, holders=1, engines=9)
    assert not skewed.carried(HOT, holders=1, engines=2)
    assert skewed.carried(HOT, holders=2, engines=2)
    assert skewed.carried(COLD, holders=1, engines=2)


def test_the_least_recently_seen_prefix_is_forgotten_first() -> None:
    heat = PrefixHeat(window=8, size=2, trusted=0)
    for key in (1, 2, 1, 3):
        heat.observe(key)
    assert heat.share(2) == 0
    assert heat.share(1) > 0 < heat.share(3)  # type: ignore[operator]
    with pytest.raises(ValueError, match="window of two"):
        PrefixHeat(window=1)


@given(st.lists(st.integers(0, 20), min_size=1, max_size=300), st.integers(2, 100))
def test_shares_lie_in_0_1_and_sum_to_at_most_1(requests: list[int], window: int) -> None:
    heat = heat_of(requests, window=window, trusted=0)
    shares = [heat.share(key) for key in set(requests)]
    assert all(s is not None and 0 <= s <= 1 + 1e-9 for s in shares)
    assert sum(s for s in shares if s is not None) <= 1 + 1e-9


# --- the router keeping heat -------------------------------------------------


def router(held: Held, heat: PrefixHeat | None) -> Router:
    cap = LoadCap(1.25, slack=2, held_factor=1.5)
    return Router(PRESETS["prefix"], cap=cap, cache=held, name="prefix", heat=heat)


def fleet(a: int, b: int, *, a_fits: bool = True) -> list[EngineLoad]:
    return [
        EngineLoad(id="a", in_flight=a, weight=100.0, reserved=a / 100, fits=a_fits),
        EngineLoad(id="b", in_flight=b, weight=100.0, reserved=b / 100),
    ]


def choose(r: Router, key: int, engines: list[EngineLoad], *, may_wait: bool = False) -> str:
    choice = r.choose(RouteRequest(affinity=key, prompt=PROMPT, may_wait=may_wait), engines)
    assert isinstance(choice, Choice | Wait)
    return choice.engine if isinstance(choice, Choice) else f"wait {choice.engine}"


# 24 in flight, 12.5 each at the fair share with one more: the load cap is
# 16 (1.25 x 12.5, rounded up), the held bound 19 (1.5 x 12.5).
def test_a_prefix_its_holder_can_carry_stays_past_the_cap_up_to_the_held_bound() -> None:
    r = router(Held({"a": 4}), heat_of(EIGHT))
    assert choose(r, 10, fleet(16, 8)) == "a"
    assert choose(r, 10, fleet(18, 6)) == "a"
    # Past the held bound it goes on (and misses).
    assert choose(r, 10, fleet(19, 5)) == "b"
    # Without heat, the load cap alone: it goes on at the cap.
    assert choose(router(Held({"a": 4}), None), 10, fleet(16, 8)) == "b"


def test_a_hot_prefix_goes_on_at_the_cap() -> None:
    r = router(Held({"a": 4}), heat_of(SKEWED))
    assert choose(r, HOT, fleet(16, 8)) == "b"
    assert choose(r, COLD, fleet(16, 8)) == "a"


def test_a_prefix_held_nowhere_stays_at_its_home_up_to_the_held_bound() -> None:
    """Evicted everywhere, it is computed where it lives (its home, the
    engine its first request went to), not where the cap would spread it:
    computed there, it would evict another document."""
    held = Held({})
    r = Router(
        PRESETS["prefix"],
        cap=LoadCap(1.25, slack=2, held_factor=1.5),
        cache=held,
        name="prefix",
        heat=heat_of(EIGHT),
        homes=Homes(),
    )
    assert choose(r, 10, fleet(0, 1)) == "a"  # its home, the least loaded
    assert choose(r, 10, fleet(16, 8)) == "a"
    assert choose(r, 10, fleet(19, 5)) == "b"
    # Without heat, the load cap alone.
    r.heat = None
    assert choose(r, 10, fleet(16, 8)) == "b"


def test_an_engine_holding_as_much_takes_the_overflow_at_the_cap() -> None:
    r = router(Held({"a": 4, "b": 4}), heat_of(EIGHT))
    assert choose(r, 10, fleet(16, 8)) == "b"


def test_a_request_waits_for_a_holder_past_the_cap_that_can_carry_its_prefix() -> None:
    """Its holder has no room now and is past the cap: a prefix it can carry
    waits for it (moved, it would miss); a hot one goes where there is room."""
    engines = fleet(16, 8, a_fits=False)
    assert choose(router(Held({"a": 4}), heat_of(EIGHT)), 10, engines, may_wait=True) == "wait a"
    assert choose(router(Held({"a": 4}), heat_of(SKEWED)), HOT, engines, may_wait=True) == "b"


def test_the_router_counts_the_prefixes_it_routes() -> None:
    """A prefix every request has brought is hot once its share is known."""
    heat = PrefixHeat(window=64, trusted=16)
    r = router(Held({"a": 4}), heat)
    assert choose(r, HOT, fleet(16, 8)) == "a"  # no share known yet
    for _ in range(20):
        choose(r, HOT, fleet(0, 0))
    assert choose(r, HOT, fleet(16, 8)) == "b"
