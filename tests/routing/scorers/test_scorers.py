"""Each scorer on its own (``app.routing.scorers``): what scores 1, what
scores 0, and the table that names them."""

from app.routing.base import EngineLoad, RouteRequest
from app.routing.scorers import SCORERS
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
    assert set(SCORERS) == {"kv_utilization", "in_flight", "prefix"}
    for make in SCORERS.values():
        assert make().score(ANY, [EngineLoad(id="a")]) in ([0.0], [1.0])
