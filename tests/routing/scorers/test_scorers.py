"""Each scorer on its own (``app.routing.scorers``): what scores 1, what
scores 0, and the table that names them."""

from app.routing.base import Adapters, EngineLoad, RouteRequest
from app.routing.scorers import SCORERS
from app.routing.scorers.adapter import FREE_SLOT, RunsTheAdapter
from app.routing.scorers.in_flight import FewestInFlight
from app.routing.scorers.kv_utilization import EmptiestBudget
from app.routing.scorers.prefix import HoldsThePrompt

ANY = RouteRequest()


def test_the_emptiest_budget_scores_highest_and_overcommit_scores_0() -> None:
    fleet = [EngineLoad(id=str(r), reserved=r) for r in (0.0, 0.25, 1.0, 1.4)]
    assert EmptiestBudget().score(ANY, fleet) == [1.0, 0.75, 0.0, 0.0]


def test_the_fewest_requests_score_1_the_most_0_and_alike_all_1() -> None:
    fleet = [EngineLoad(id=str(n), in_flight=n) for n in (2, 4, 6)]
    assert FewestInFlight().score(ANY, fleet) == [1.0, 0.5, 0.0]
    alike = [EngineLoad(id=str(i), in_flight=7) for i in range(3)]
    assert FewestInFlight().score(ANY, alike) == [1.0, 1.0, 1.0]


def test_the_engine_holding_the_most_of_the_prompt_scores_1_the_others_their_share() -> None:
    fleet = [EngineLoad(id="a", held=8), EngineLoad(id="b", held=2), EngineLoad(id="c", held=0)]
    assert HoldsThePrompt().score(ANY, fleet) == [1.0, 0.25, 0.0]


def test_nothing_known_or_nothing_held_scores_every_engine_0() -> None:
    unknown = [EngineLoad(id="a"), EngineLoad(id="b")]
    nothing = [EngineLoad(id="a", held=0), EngineLoad(id="b", held=0)]
    assert HoldsThePrompt().score(ANY, unknown) == [0.0, 0.0]
    assert HoldsThePrompt().score(ANY, nothing) == [0.0, 0.0]


def test_every_name_in_the_table_makes_its_scorer() -> None:
    assert set(SCORERS) == {"kv_utilization", "in_flight", "prefix", "adapter"}
    for make in SCORERS.values():
        assert make().score(ANY, [EngineLoad(id="a")]) in ([0.0], [1.0])


def lora(slots: int | None, *active: str) -> Adapters:
    return Adapters(served=frozenset({"a", "b", "c"}), slots=slots, admitted=frozenset(active))


def test_the_engine_using_the_adapter_scores_1_a_free_slot_half_a_swap_0() -> None:
    fleet = [
        EngineLoad(id="using", adapters=lora(1, "a")),
        EngineLoad(id="free", adapters=lora(2, "b")),
        EngineLoad(id="full", adapters=lora(2, "b", "c")),
        EngineLoad(id="unknown", adapters=lora(None)),
    ]
    assert RunsTheAdapter().score(RouteRequest(model="a"), fleet) == [
        1.0,
        FREE_SLOT,
        0.0,
        FREE_SLOT,
    ]


def test_a_base_model_request_scores_every_engine_alike() -> None:
    fleet = [
        EngineLoad(id="using", adapters=lora(1, "a")),
        EngineLoad(id="full", adapters=lora(1, "b")),
    ]
    assert RunsTheAdapter().score(RouteRequest(model="tiny"), fleet) == [1.0, 1.0]
    assert RunsTheAdapter().score(ANY, fleet) == [1.0, 1.0]


def test_a_report_does_not_outweigh_the_gateways_own_requests() -> None:
    """A report a second old names ``a`` on both engines; this gateway's own
    requests fill the second one's slot with ``b``: ``a`` runs on the first."""
    served = frozenset({"a", "b"})
    fleet = [
        EngineLoad(id="first", adapters=Adapters(served, 1, frozenset({"a"}), frozenset({"a"}))),
        EngineLoad(id="second", adapters=Adapters(served, 1, frozenset({"b"}), frozenset({"a"}))),
        EngineLoad(id="other", adapters=Adapters(served, 1, frozenset(), frozenset({"a"}))),
    ]
    assert RunsTheAdapter().score(RouteRequest(model="a"), fleet) == [1.0, 0.0, 1.0]
