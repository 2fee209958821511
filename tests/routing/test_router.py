"""A route with a cache view (``app.routing.router``): each engine carries
what it holds of the prompt for every engine or for none, and a fallback to
the approximate key says why. Pure: the view is a table."""

from collections.abc import Sequence
from dataclasses import dataclass, field

from app.routing.base import Choice, EngineLoad, RouteRequest
from app.routing.block_index import PromptBlocks
from app.routing.prefix import PrefixAffinity
from app.routing.router import Router

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


@dataclass
class Recorder:
    """A picker that takes the first engine and keeps what it was shown."""

    seen: list[EngineLoad] = field(default_factory=list)

    def choose(
        self, affinity: int | None, engines: Sequence[EngineLoad], *, may_wait: bool = False
    ) -> Choice | None:
        self.seen = list(engines)
        return Choice(engines[0].id)


FLEET = [EngineLoad("a", 0, 1.0, 0.0, True), EngineLoad("b", 0, 1.0, 0.0, True)]


def test_every_engine_carries_what_it_holds_when_all_are_known() -> None:
    picker = Recorder()
    choice = Router(picker, cache=Table({"a": 2, "b": 5})).choose(
        RouteRequest(prompt=PROMPT), FLEET
    )
    assert [e.held for e in picker.seen] == [2, 5]
    assert choice == Choice("a")


def test_one_engine_not_known_ranks_all_by_the_key_and_says_so() -> None:
    picker = Recorder()
    choice = Router(picker, cache=Table({"b": 5})).choose(RouteRequest(prompt=PROMPT), FLEET)
    assert [e.held for e in picker.seen] == [None, None]
    assert choice == Choice("a", fallback="events")


def test_a_prompt_without_token_ids_falls_back_and_says_so() -> None:
    table = Table({"a": 2, "b": 5})
    choice = Router(Recorder(), cache=table).choose(RouteRequest(), FLEET)
    assert choice == Choice("a", fallback="token_ids")
    assert table.asked == []


def test_without_a_cache_view_nothing_is_asked_and_nothing_falls_back() -> None:
    picker = Recorder()
    choice = Router(picker).choose(RouteRequest(prompt=PROMPT), FLEET)
    assert [e.held for e in picker.seen] == [None, None]
    assert choice == Choice("a")


def test_an_engine_filtered_out_is_not_asked_and_does_not_cause_a_fallback() -> None:
    """An ejected engine's events do not matter: it takes nothing."""
    table = Table({"b": 3})
    fleet = [EngineLoad("a", 0, 1.0, 0.0, True, up=False), FLEET[1]]
    choice = Router(PrefixAffinity(), cache=table).choose(
        RouteRequest(affinity=7, prompt=PROMPT), fleet
    )
    assert isinstance(choice, Choice)
    assert (choice.engine, choice.fallback) == ("b", None)
    assert table.asked == ["b"]
