"""Reading usage by a route's field names (``app.relay.usage``): each
route's own names, what is not a count left unknown, and an answer that is
not JSON or has no usage read as nothing; the engine's own per-request
figures where it gives them whole."""

import pytest

from app.relay.usage import answer_usage, engine_timing, usage_counts
from app.request.record import EngineTiming
from app.request.routes import ROUTES, ApiRoute


@pytest.mark.parametrize("route", ROUTES.values(), ids=lambda route: route.name)
def test_each_route_is_read_by_its_own_names(route: ApiRoute) -> None:
    names = route.usage
    assert usage_counts({names.prompt[0]: 9, names.output: 4}, names) == (9, 4)


def test_the_responses_names_are_not_openais() -> None:
    responses, chat = ROUTES["responses"].usage, ROUTES["chat"].usage
    openai_shaped = {"prompt_tokens": 9, "completion_tokens": 4}
    assert usage_counts(openai_shaped, responses) == (None, None)
    assert usage_counts(openai_shaped, chat) == (9, 4)


@pytest.mark.parametrize("value", [True, "9", 9.5, None, [9]])
def test_what_is_not_a_count_is_unknown(value: object) -> None:
    names = ROUTES["chat"].usage
    assert usage_counts({names.prompt[0]: value, names.output: 4}, names) == (None, 4)


@pytest.mark.parametrize("content", [b"", b"not json", b"[1, 2]", b'{"usage": 3}', b"{}"])
def test_an_answer_without_usage_says_nothing(content: bytes) -> None:
    assert answer_usage(content, ROUTES["chat"].usage) == (None, None)


def test_a_whole_answers_usage() -> None:
    body = b'{"id": "x", "usage": {"input_tokens": 12, "output_tokens": 3}}'
    assert answer_usage(body, ROUTES["responses"].usage) == (12, 3)


def test_the_engines_own_figures_are_read_in_seconds() -> None:
    answer = {
        "usage": {"prompt_tokens": 3, "completion_tokens": 4},
        "metrics": {"queue_time_ms": 12.0, "time_to_first_token_ms": 30, "generation_time_ms": 80},
    }
    assert engine_timing(answer) == EngineTiming(0.012, 0.03, 0.08)
    assert engine_timing({"metrics": {"queue_time_ms": 1, "time_to_first_token_ms": 2}}) == (
        EngineTiming(0.001, 0.002, None)
    )


@pytest.mark.parametrize(
    "metrics",
    [
        None,
        "fast",
        {},
        {"queue_time_ms": 1},
        {"queue_time_ms": None, "time_to_first_token_ms": 2},
        {"queue_time_ms": True, "time_to_first_token_ms": 2},
        {"queue_time_ms": -1, "time_to_first_token_ms": 2},
        {"queue_time_ms": "1", "time_to_first_token_ms": 2},
    ],
)
def test_figures_the_engine_did_not_give_whole_are_none(metrics: object) -> None:
    assert engine_timing({"metrics": metrics}) is None
