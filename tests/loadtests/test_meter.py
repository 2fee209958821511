"""Measuring a stream as a client sees it, and what the engine says it took."""

import json

import pytest

from loadtests.meter import StreamMeter
from loadtests.schedule import schedule


def event(payload: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


ROLE = event({"choices": [{"delta": {"role": "assistant", "content": ""}}]})
TOKEN = event({"choices": [{"delta": {"content": "x"}}]})
USAGE = event({"choices": [], "usage": {"completion_tokens": 3}})


def test_first_token_gaps_and_usage() -> None:
    meter = StreamMeter(started=10.0)
    meter.feed(ROLE, 10.1)
    meter.feed(TOKEN[:9], 10.2)  # half an event: nothing yet
    meter.feed(TOKEN[9:], 10.3)
    meter.feed(TOKEN + TOKEN, 10.5)
    meter.feed(USAGE + b"data: [DONE]\n\n", 10.6)
    assert meter.ttft == pytest.approx(0.3)
    assert meter.content_events == 3
    assert meter.gaps == pytest.approx([0.2, 0.0])
    assert meter.tokens == 3


def test_the_residual_is_the_ttft_less_the_engines_own_time() -> None:
    """The engine's queue and time to first token, beside its final usage,
    come off the client's TTFT; where it gives none there is no residual."""
    timed = event(
        {
            "choices": [],
            "usage": {"completion_tokens": 1},
            "metrics": {"queue_time_ms": 100.0, "time_to_first_token_ms": 50.0},
        }
    )
    meter = StreamMeter(started=10.0)
    meter.feed(TOKEN, 10.4)
    assert meter.residual is None
    meter.feed(timed + b"data: [DONE]\n\n", 10.5)
    assert meter.residual == pytest.approx(0.25)
    untimed = StreamMeter(started=10.0)
    untimed.feed(TOKEN + USAGE, 10.4)
    assert untimed.residual is None


def test_without_usage_tokens_are_counted_from_events() -> None:
    meter = StreamMeter(started=0.0)
    meter.feed(TOKEN * 4, 1.0)
    assert meter.tokens == 4


def test_degradation_steps_follow_the_environment() -> None:
    stages = schedule("degradation", {"LOAD_STEPS": "1,4,16", "LOAD_STEP_SECONDS": "10"})
    assert [(s.start, s.end, s.users) for s in stages] == [(0, 10, 1), (10, 20, 4), (20, 30, 16)]
    assert [s.users for s in schedule("degradation", {})] == [1, 2, 4, 8, 16, 32, 64]
    assert schedule("spike", {})[1].users > schedule("spike", {})[0].users
    with pytest.raises(ValueError, match="unknown shape"):
        schedule("sideways", {})
