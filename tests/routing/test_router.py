"""A route (``app.routing.router``): the scorers' weighted sum and the
pick, and the cache view — each engine carries what it holds of the prompt
for every engine or for none, and a fallback to the approximate key says
why. Pure: the view is a table; hypothesis where the properties are clear."""

from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from app.routing.base import Choice, EngineLoad, RouteRequest
from app.routing.block_index import PromptBlocks
from app.routing.load_cap import LoadCap
from app.routing.router import Router
from app.routing.scorers import SCORERS, ScorerName
from tests.support.routing import prefix_router

PROMPT = PromptBlocks((1, 2, 3, 4))


@dataclass
class Table:
    """Leading blocks held, by engine (absent: not known)."""

    held_by: dict[str, int]
    asked: list[str] = field(default_factory=list)

    def held(self, request: RouteRequest, engine: str) -> int | None:
        assert request.prompt is PROMPT
        self.asked.append(engine)
        return self.held_by.get(engine)


FLEET = [EngineLoad(id="a"), EngineLoad(id="b")]


def test_every_engine_carries_what_it_holds_when_all_are_known() -> None:
    for key in range(20):
        choice = prefix_router(Table({"a": 2, "b": 5})).choose(
            RouteRequest(affinity=key, prompt=PROMPT), FLEET
        )
        assert choice == Choice("b", "b")


def test_one_engine_not_known_ranks_all_by_the_key_and_says_so() -> None:
    """Only b is known to hold the prompt: the key decides, for every key,
    as if nothing were known (both engines win some keys)."""
    chosen = set()
    for key in range(20):
        choice = prefix_router(Table({"b": 5})).choose(
            RouteRequest(affinity=key, prompt=PROMPT), FLEET
        )
        by_key = prefix_router().choose(RouteRequest(affinity=key), FLEET)
        assert isinstance(choice, Choice)
        assert isinstance(by_key, Choice)
        assert (choice.engine, choice.fallback) == (by_key.engine, "events")
        chosen.add(choice.engine)
    assert chosen == {"a", "b"}


def test_a_prompt_without_token_ids_falls_back_and_says_so() -> None:
    table = Table({"a": 2, "b": 5})
    choice = prefix_router(table).choose(RouteRequest(affinity=1), FLEET)
    assert isinstance(choice, Choice)
    assert choice.fallback == "token_ids"
    assert table.asked == []


def test_a_route_that_weighs_no_prompt_asks_no_cache_view() -> None:
    table = Table({"a": 2, "b": 5})
    choice = Router(cache=table).choose(RouteRequest(affinity=1, prompt=PROMPT), FLEET)
    assert choice == Choice("a")
    assert table.asked == []


def test_an_engine_filtered_out_is_not_asked_and_does_not_cause_a_fallback() -> None:
    """An ejected engine's events do not matter: it takes nothing."""
    table = Table({"b": 3})
    fleet = [EngineLoad(id="a", up=False), FLEET[1]]
    choice = prefix_router(table).choose(RouteRequest(affinity=7, prompt=PROMPT), fleet)
    assert isinstance(choice, Choice)
    assert (choice.engine, choice.fallback) == ("b", None)
    assert table.asked == ["b"]


# --- the scorer stage ---------------------------------------------------------------


@dataclass
class Asked:
    """A scorer that counts the times it is asked and scores by a table."""

    scores: dict[str, float]
    calls: list[int] = field(default_factory=list)

    def score(self, request: RouteRequest, engines: Sequence[EngineLoad]) -> list[float]:
        self.calls.append(len(engines))
        return [self.scores.get(e.id, 0.0) for e in engines]


def test_a_scorer_at_weight_0_is_out_of_the_decision_and_not_asked() -> None:
    favours_b = Asked({"b": 1.0})
    table = {**SCORERS, "prefix": lambda: favours_b}
    fleet = [EngineLoad(id="a", in_flight=1), EngineLoad(id="b", in_flight=5)]
    out = Router({"in_flight": 1.0, "prefix": 0.0}, table=table)
    assert out.choose(RouteRequest(), fleet) == Choice("a")
    assert favours_b.calls == []
    # Weighed, the same scorer decides.
    weighed = Router({"in_flight": 1.0, "prefix": 2.0}, table=table)
    choice = weighed.choose(RouteRequest(), fleet)
    assert isinstance(choice, Choice)
    assert choice.engine == "b"
    assert favours_b.calls == [2]


def test_the_weights_trade_what_an_engine_holds_against_its_load() -> None:
    """The holder runs 10 requests, the other 0: prefix alone keeps the
    request on the holder; with the requests in flight weighed more, it
    goes to the idle engine."""
    fleet = [
        EngineLoad(id="holder", in_flight=10, weight=100.0, held=4),
        EngineLoad(id="idle", in_flight=0, weight=100.0, held=0),
    ]
    request = RouteRequest(affinity=3)
    by_prefix = Router({"prefix": 1.0, "in_flight": 0.5}).choose(request, fleet)
    by_load = Router({"prefix": 1.0, "in_flight": 2.0}).choose(request, fleet)
    assert isinstance(by_prefix, Choice)
    assert isinstance(by_load, Choice)
    assert (by_prefix.engine, by_load.engine) == ("holder", "idle")
    assert by_load.preferred == "idle"


def test_least_loaded_takes_the_emptiest_budget_and_fewest_requests_then_the_id() -> None:
    fleet = [
        EngineLoad(id=f"e{i}", in_flight=n, weight=100.0, reserved=n / 10)
        for i, n in enumerate((3, 1, 2))
    ]
    assert Router().choose(RouteRequest(), fleet) == Choice("e1")
    tie = [EngineLoad(id="e1", in_flight=1), EngineLoad(id="e0", in_flight=1)]
    assert Router().choose(RouteRequest(), tie) == Choice("e0")


def test_nothing_fits_nothing_is_chosen() -> None:
    fleet = [EngineLoad(id="a", fits=False), EngineLoad(id="b", fits=False)]
    assert Router().choose(RouteRequest(), fleet) is None
    assert prefix_router().choose(RouteRequest(affinity=7), fleet) is None


engine_loads = st.lists(
    st.builds(
        EngineLoad,
        id=st.sampled_from("abcdefgh"),
        in_flight=st.integers(0, 50),
        weight=st.sampled_from((50.0, 100.0, 300.0)),
        reserved=st.floats(0.0, 1.5),
        fits=st.booleans(),
        held=st.one_of(st.none(), st.integers(0, 8)),
    ),
    min_size=1,
    max_size=6,
    unique_by=lambda e: e.id,
)
weights = st.fixed_dictionaries(
    {name: st.sampled_from((0.0, 0.5, 1.0, 3.0)) for name in SCORERS}
).filter(lambda w: any(w.values()))


@given(engine_loads, weights, st.integers(0, 1000), st.booleans())
def test_the_pick_fits_is_the_best_scored_and_ignores_the_engines_order(
    fleet: list[EngineLoad], weights: dict[ScorerName, float], key: int, capped: bool
) -> None:
    router = Router(weights, cap=LoadCap(1.25, 2) if capped else None)
    request = RouteRequest(affinity=key)
    choice = router.choose(request, fleet)
    fitting = [e for e in fleet if e.fits]
    if not fitting:
        assert choice is None
        return
    assert isinstance(choice, Choice)
    assert choice == router.choose(request, list(reversed(fleet)))
    chosen = next(e for e in fleet if e.id == choice.engine)
    assert chosen.fits
    ranked = router.rank(request, fleet)
    if not capped:
        # The best-ranked engine that fits, and no fitting engine outscores it.
        assert chosen is next(e for e in ranked if e.fits)
    elif any(router.cap.under(e, fleet) for e in fitting):  # type: ignore[union-attr]
        assert router.cap.under(chosen, fleet)  # type: ignore[union-attr]


@given(engine_loads, weights)
def test_every_scorer_scores_each_engine_within_0_and_1(
    fleet: list[EngineLoad], weights: dict[ScorerName, float]
) -> None:
    for make in SCORERS.values():
        scores = make().score(RouteRequest(), fleet)
        assert len(scores) == len(fleet)
        assert all(0.0 <= s <= 1.0 for s in scores)
