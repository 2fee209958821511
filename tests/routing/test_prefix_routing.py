"""Prefix routing: the router with the ``prefix`` preset (what the engines
hold of the prompt, the prompt's key breaking ties) and the load cap. Pure,
no engines."""

import math
import random

from app.routing.base import Choice, EngineLoad, Wait
from tests.support.routing import PrefixRoute


def engines(*loads: int, fits: bool = True) -> list[EngineLoad]:
    return [
        EngineLoad(id=f"e{i}", in_flight=n, weight=100.0, reserved=n / 10, fits=fits)
        for i, n in enumerate(loads)
    ]


def test_only_engines_where_the_request_fits_are_chosen() -> None:
    fleet = engines(0, 5)
    full = EngineLoad(id="e0", in_flight=0, weight=100.0, reserved=0.0, fits=False)
    for key in range(50):
        choice = PrefixRoute().choose(key, [full, fleet[1]])
        assert isinstance(choice, Choice)
        assert choice.engine == "e1"


def test_a_prefix_keeps_to_one_engine_and_keys_spread_over_all() -> None:
    router = PrefixRoute()
    fleet = engines(2, 2, 2, 2)
    picks = {}
    for key in range(400):
        first = router.choose(key, fleet)
        again = router.choose(key, list(reversed(fleet)))
        assert isinstance(first, Choice)
        assert isinstance(again, Choice)
        assert first.engine == again.engine == first.preferred
        picks[key] = first.engine
    counts = {e.id: list(picks.values()).count(e.id) for e in fleet}
    assert min(counts.values()) > 60


def test_an_ejected_engine_moves_only_its_own_keys() -> None:
    router = PrefixRoute()
    fleet = engines(0, 0, 0)
    before = {}
    for key in range(300):
        choice = router.choose(key, fleet)
        assert isinstance(choice, Choice)
        before[key] = choice.engine
    without = [e for e in fleet if e.id != "e1"]
    for key in range(300):
        choice = router.choose(key, without)
        assert isinstance(choice, Choice)
        if before[key] != "e1":
            assert choice.engine == before[key]


def test_a_hot_prefix_is_capped_at_the_factor_times_the_mean() -> None:
    """Everyone sends one document: its engine fills to its cap, then the
    next in the ranking takes the rest; no engine ends above the cap."""
    router = PrefixRoute(factor=1.25, slack=0)
    load = {f"e{i}": 0 for i in range(4)}
    overrides = 0
    for _ in range(200):
        fleet = [
            EngineLoad(id=i, in_flight=n, weight=100.0, reserved=n / 100, fits=True)
            for i, n in load.items()
        ]
        choice = router.choose(42, fleet)
        assert isinstance(choice, Choice)
        overrides += choice.overridden
        load[choice.engine] += 1
        total = sum(load.values())
        assert max(load.values()) <= math.ceil(1.25 * total / 4)
    assert overrides > 0


def test_the_cap_follows_capacity_on_engines_of_different_sizes() -> None:
    router = PrefixRoute(factor=1.0, slack=0)
    load = {"big": 0, "small": 0}
    weight = {"big": 300.0, "small": 100.0}
    rng = random.Random(1)
    for _ in range(400):
        fleet = [
            EngineLoad(id=i, in_flight=n, weight=weight[i], reserved=0.0, fits=True)
            for i, n in load.items()
        ]
        choice = router.choose(rng.randrange(3), fleet)
        assert isinstance(choice, Choice)
        load[choice.engine] += 1
    assert load["big"] >= 2.5 * load["small"]


def test_no_engine_under_its_cap_falls_back_to_the_least_loaded() -> None:
    # e0 is far over its share (cap ceil(31 / 2) = 16) and e1 has no room:
    # the request still goes somewhere it fits.
    crowded = [
        EngineLoad(id="e0", in_flight=30, weight=100.0, reserved=0.9, fits=True),
        EngineLoad(id="e1", in_flight=0, weight=100.0, reserved=0.5, fits=False),
    ]
    choice = PrefixRoute(factor=1.0, slack=0).choose(3, crowded)
    assert isinstance(choice, Choice)
    assert choice.engine == "e0"


def test_at_low_load_a_prefix_stays_on_its_engine() -> None:
    """Three requests on three idle engines: the fair share is one request
    each, yet the slack keeps them together on the prefix's engine."""
    router = PrefixRoute(factor=1.25, slack=2)
    load = {f"e{i}": 0 for i in range(3)}
    chosen = set()
    for _ in range(3):
        fleet = [
            EngineLoad(id=i, in_flight=n, weight=100.0, reserved=0.0, fits=True)
            for i, n in load.items()
        ]
        choice = router.choose(99, fleet)
        assert isinstance(choice, Choice)
        chosen.add(choice.engine)
        load[choice.engine] += 1
    assert len(chosen) == 1


def held(loads: dict[str, int], holds: dict[str, int]) -> list[EngineLoad]:
    return [
        EngineLoad(
            id=i, in_flight=n, weight=100.0, reserved=n / 100, fits=True, held=holds.get(i, 0)
        )
        for i, n in loads.items()
    ]


def test_the_engine_that_holds_most_of_the_prompt_ranks_first_whatever_the_key() -> None:
    """What the engines report holding outranks the key: for every key, the
    engine holding the most leading blocks is preferred and chosen."""
    router = PrefixRoute()
    for key in range(100):
        for holder in ("e0", "e1", "e2"):
            holds = {"e0": 1, "e1": 1, "e2": 1, holder: 5}
            choice = router.choose(key, held({"e0": 0, "e1": 0, "e2": 0}, holds))
            assert isinstance(choice, Choice)
            assert choice.engine == choice.preferred == holder


def test_engines_that_hold_alike_are_ranked_by_the_key() -> None:
    """Nothing cached anywhere yet (or the same everywhere): the key's ranking,
    as without events, so a new prefix's requests still meet on one engine."""
    router = PrefixRoute()
    fleet = {"e0": 0, "e1": 0, "e2": 0}
    chosen = set()
    for key in range(100):
        by_key = router.choose(key, engines(0, 0, 0))
        assert isinstance(by_key, Choice)
        for same in (0, 3):
            choice = router.choose(key, held(fleet, dict.fromkeys(fleet, same)))
            assert isinstance(choice, Choice)
            assert choice.engine == by_key.engine
            chosen.add(choice.engine)
    # The keys spread over every engine, as the key's ranking does.
    assert chosen == set(fleet)


def test_a_holder_over_its_cap_passes_the_request_to_the_next_best_holder() -> None:
    """The load cap holds for what engines report too: past it, the request
    goes to the engine that holds the next most, not to the key's choice."""
    router = PrefixRoute(factor=1.0, slack=0)
    loads = {"e0": 6, "e1": 0, "e2": 0}
    holds = {"e0": 8, "e1": 0, "e2": 2}
    for key in range(50):
        choice = router.choose(key, held(loads, holds))
        assert isinstance(choice, Choice)
        assert (choice.engine, choice.preferred, choice.overridden) == ("e2", "e0", True)


def holding(held: int, in_flight: int = 4, fits: bool = False) -> EngineLoad:
    return EngineLoad(
        id="holder", in_flight=in_flight, weight=100.0, reserved=0.9, fits=fits, held=held
    )


def test_a_request_that_may_wait_waits_for_the_engine_holding_the_most_of_its_prompt() -> None:
    other = EngineLoad(id="other", in_flight=3, weight=100.0, reserved=0.1, fits=True, held=0)
    assert PrefixRoute().choose(1, [holding(5), other], may_wait=True) == Wait("holder")
    # Not allowed to wait (its wait is over): where it fits, now.
    choice = PrefixRoute().choose(1, [holding(5), other])
    assert isinstance(choice, Choice)
    assert choice.engine == "other"


def test_nothing_waits_for_an_engine_when_one_with_room_holds_as_much_or_none_holds_any() -> None:
    as_much = EngineLoad(id="other", in_flight=3, weight=100.0, reserved=0.1, fits=True, held=5)
    choice = PrefixRoute().choose(1, [holding(5), as_much], may_wait=True)
    assert isinstance(choice, Choice)
    assert choice.engine == "other"
    unknown = [
        holding(0),
        EngineLoad(id="other", in_flight=3, weight=100.0, reserved=0.1, fits=True),
    ]
    assert isinstance(PrefixRoute().choose(1, unknown, may_wait=True), Choice)


def test_nothing_waits_for_an_engine_loaded_past_its_cap() -> None:
    other = EngineLoad(id="other", in_flight=0, weight=100.0, reserved=0.1, fits=True, held=0)
    choice = PrefixRoute().choose(1, [holding(5, in_flight=10), other], may_wait=True)
    assert isinstance(choice, Choice)
    assert choice.engine == "other"
