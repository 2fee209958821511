"""Homes (``app.routing.homes``): where a prefix no engine holds is
computed. The table itself (least recently used forgotten first), and the
router keeping one: a new prefix goes to the least loaded engine and comes
back there once evicted everywhere, documents arriving together spread by
the load they bring (where their keys alone would put them by chance), and
a home that left the fleet is replaced. Pure, no engines."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.base import Choice, EngineLoad, RouteRequest
from app.routing.block_index import PromptBlocks
from app.routing.homes import Homes
from app.routing.load_cap import LoadCap
from app.routing.rendezvous import key_weight
from app.routing.router import Router
from app.routing.scorers import PRESETS
from tests.support.routing import FACTOR, SLACK, Held

PROMPT = PromptBlocks((1, 2, 3, 4))


def router(held: Held, homes: Homes | None) -> Router:
    return Router(
        PRESETS["prefix"], cap=LoadCap(FACTOR, SLACK), cache=held, name="prefix", homes=homes
    )


def fleet(a: int, b: int) -> list[EngineLoad]:
    return [
        EngineLoad(id=name, in_flight=n, weight=100.0, reserved=n / 100)
        for name, n in (("a", a), ("b", b))
    ]


def by_key(key: int) -> str:
    return max("ab", key=lambda engine: key_weight(key, engine))


def choose(r: Router, key: int, engines: list[EngineLoad]) -> str:
    choice = r.choose(RouteRequest(affinity=key, prompt=PROMPT), engines)
    assert isinstance(choice, Choice)
    return choice.engine


def test_the_least_recently_used_home_is_forgotten_first() -> None:
    homes = Homes(size=2)
    homes.settle(1, "a")
    homes.settle(2, "b")
    assert homes.get(1) == "a"  # 1 used since 2
    homes.settle(3, "a")
    assert (homes.get(1), homes.get(2), homes.get(3)) == ("a", None, "a")
    assert len(homes) == 2
    with pytest.raises(ValueError, match="room for one prefix"):
        Homes(size=0)


def test_a_new_prefix_goes_to_the_least_loaded_and_comes_back_there_once_evicted() -> None:
    """The key hashes to the busier engine; the prefix is computed on the
    idler one, then held there; evicted everywhere, it returns there though
    the other engine is now the idler."""
    key = next(k for k in range(100) if by_key(k) == "a")
    held = Held({})
    r = router(held, Homes())
    assert choose(r, key, fleet(3, 1)) == "b"
    held.held_by = {"b": 4}
    assert choose(r, key, fleet(3, 3)) == "b"
    held.held_by = {}
    assert choose(r, key, fleet(1, 3)) == "b"


def test_without_homes_a_prefix_nobody_holds_goes_where_its_key_hashes() -> None:
    key = next(k for k in range(100) if by_key(k) == "a")
    assert choose(router(Held({}), None), key, fleet(3, 1)) == "a"


def test_what_an_engine_holds_outranks_the_home() -> None:
    """Placed on b, the prefix is found cached on a (another replica put it
    there): it goes to a."""
    r = router(Held({}), Homes())
    key = 7
    home = choose(r, key, fleet(0, 0))
    other = "b" if home == "a" else "a"
    r.cache = Held({other: 4})
    assert choose(r, key, fleet(0, 0)) == other


def test_a_home_that_left_the_fleet_is_replaced() -> None:
    homes = Homes()
    r = router(Held({}), homes)
    homes.settle(5, "gone")
    assert choose(r, 5, fleet(2, 0)) == "b"
    assert homes.get(5) == "b"


@given(st.lists(st.integers(0, 2**63), min_size=8, max_size=8, unique=True))
def test_documents_arriving_together_split_evenly_whatever_their_keys(keys: list[int]) -> None:
    """Eight documents' first requests, one after the other, each adding a
    request to its engine: four go to each (by their keys alone, 4/4 a
    quarter of the time)."""
    r = router(Held({}), Homes())
    load = {"a": 0, "b": 0}
    for key in keys:
        engine = choose(r, key, fleet(load["a"], load["b"]))
        load[engine] += 1
    assert load == {"a": 4, "b": 4}
    # Each document's next request, nothing held yet, comes back to it.
    for key in keys:
        assert choose(r, key, fleet(0, 0)) == r.homes.get(key)  # type: ignore[union-attr]
