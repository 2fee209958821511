"""The router the settings describe (``app.routing.setup``): ``auto`` is
prefix routing where the engines publish KV events and least loaded where
they do not; ``GATEWAY_ROUTING_SCORERS`` replaces a preset's weights, and a
mistake in it is said plainly at start-up."""

import pytest

from app.routing.block_index import BlockIndex
from app.routing.scorers import PRESETS, scorer_weights
from app.routing.setup import build_router, routing_preset
from app.settings import Settings

EVENTS = "tcp://{host}:{port+100}"
INDEXES: dict[str, BlockIndex] = {}


def test_auto_routes_by_prefix_where_the_engines_publish_events() -> None:
    with_events = Settings(kv_events_endpoint=EVENTS)
    assert routing_preset(with_events) == "prefix"
    router = build_router(with_events, INDEXES)
    assert router.reads_prompts
    assert router.cache is not None
    assert router.cap is not None
    assert router.name == "prefix"


def test_auto_routes_to_the_least_loaded_without_events() -> None:
    router = build_router(Settings(), INDEXES)
    assert routing_preset(Settings()) == "least_loaded"
    assert not router.reads_prompts
    assert router.cache is None
    assert router.cap is None
    assert router.name == "least_loaded"


def test_only_a_route_that_weighs_the_prompt_has_a_load_cap() -> None:
    assert build_router(Settings(routing_scorers="adapter=1"), INDEXES).cap is None
    assert build_router(Settings(routing_scorers="prefix=1,adapter=4"), INDEXES).cap is not None


def test_a_preset_named_is_the_preset_whatever_the_events() -> None:
    assert routing_preset(Settings(routing="least_loaded", kv_events_endpoint=EVENTS)) == (
        "least_loaded"
    )
    by_key = build_router(Settings(routing="prefix"), INDEXES)
    assert by_key.reads_prompts
    assert by_key.cache is None  # ranked by the prompt's key alone


def test_the_scorers_setting_replaces_the_presets_weights() -> None:
    router = build_router(
        Settings(routing_scorers="prefix=2, in_flight=0.5", kv_events_endpoint=EVENTS), INDEXES
    )
    assert [(type(s).__name__, w) for s, w in router.scorers] == [
        ("HoldsThePrompt", 2.0),
        ("FewestInFlight", 0.5),
    ]
    assert router.name == "prefix=2,in_flight=0.5"
    assert router.cap is not None
    assert (
        build_router(Settings(), INDEXES).scorers[0][1] == PRESETS["least_loaded"]["kv_utilization"]
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("prefx=1", "unknown scorer 'prefx'"),
        ("prefix", "needs a weight"),
        ("prefix=-1", "needs a weight"),
        ("prefix=x", "needs a weight"),
        ("prefix=nan", "needs a weight"),
        ("prefix=0,in_flight=0", "no scorer with a weight above 0"),
    ],
)
def test_a_mistake_in_the_weights_is_said_plainly(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        scorer_weights(text)
    with pytest.raises(ValueError, match=says):
        build_router(Settings(routing_scorers=text), INDEXES)


def test_homes_are_kept_only_beside_the_engines_events_and_by_load() -> None:
    assert build_router(Settings(kv_events_endpoint=EVENTS), INDEXES).homes is not None
    by_key = Settings(kv_events_endpoint=EVENTS, routing_placement="key")
    assert build_router(by_key, INDEXES).homes is None
    assert build_router(Settings(routing="prefix"), INDEXES).homes is None


def test_heat_is_kept_only_beside_the_engines_events_and_the_held_bound_is_set() -> None:
    router = build_router(Settings(kv_events_endpoint=EVENTS), INDEXES)
    assert router.heat is not None
    assert router.cap is not None
    assert router.cap.held_factor == 2.0
    held = Settings(kv_events_endpoint=EVENTS, routing_held_load_factor=3)
    assert build_router(held, INDEXES).cap.held_factor == 3  # type: ignore[union-attr]
    # Never below the load cap's own factor.
    low = Settings(kv_events_endpoint=EVENTS, routing_held_load_factor=1, routing_load_factor=1.5)
    assert build_router(low, INDEXES).cap.held_factor == 1.5  # type: ignore[union-attr]
    assert build_router(Settings(routing="prefix"), INDEXES).heat is None
