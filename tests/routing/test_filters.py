"""The filters every route starts with, and a route made of filters and a picker."""

from app.routing.base import EngineLoad, RouteRequest
from app.routing.filters import eligible
from app.routing.router import Router


def engine(id: str, *, up: bool = True, models: str = "m", in_flight: int = 0) -> EngineLoad:
    return EngineLoad(
        id=id,
        in_flight=in_flight,
        weight=100.0,
        reserved=in_flight / 10,
        up=up,
        models=frozenset(models.split()),
    )


def test_a_request_goes_only_to_engines_in_routing_that_serve_its_model_and_were_not_tried() -> (
    None
):
    fleet = [
        engine("down", up=False),
        engine("other", models="x"),
        engine("tried"),
        engine("good"),
    ]
    request = RouteRequest("m", excluded=frozenset({"tried"}))
    assert [e.id for e in eligible(request, fleet)] == ["good"]
    # No model asked: any engine's.
    assert [e.id for e in eligible(RouteRequest(), fleet)] == ["other", "tried", "good"]


def test_a_pinned_request_goes_to_its_engine_or_nowhere() -> None:
    fleet = [engine("calm"), engine("holder", in_flight=5), engine("down", up=False)]
    choice = Router().choose(RouteRequest("m", pinned="holder"), fleet)
    assert choice is not None
    assert choice.engine == "holder"
    assert eligible(RouteRequest("m", pinned="down"), fleet) == []


def test_the_router_picks_among_what_the_filters_keep() -> None:
    # The least loaded engine is down: the picker never sees it.
    fleet = [engine("down", up=False), engine("busy", in_flight=5), engine("calm", in_flight=1)]
    choice = Router().choose(RouteRequest("m"), fleet)
    assert choice is not None
    assert choice.engine == "calm"
    assert Router().choose(RouteRequest("m"), [engine("down", up=False)]) is None


class OnlyEven:
    """A policy of one's own is one small class."""

    def keep(self, request: RouteRequest, engine: EngineLoad) -> bool:
        return int(engine.id[1:]) % 2 == 0


def test_a_new_filter_plugs_in_beside_the_others() -> None:
    fleet = [engine(f"e{i}", in_flight=9 - i) for i in range(4)]
    router = Router(filters=(*Router().filters, OnlyEven()))
    choice = router.choose(RouteRequest("m"), fleet)
    assert choice is not None
    assert choice.engine == "e2"
