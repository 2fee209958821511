"""How an engine writes a stream (seconds per token, tokens per event),
learned from its completed streams (``app.admission.itl``), and learned
through the lane."""

import pytest

from app.admission.itl import InterTokenEstimate
from app.admission.lane import KvLane
from app.admission.publish import budget_status
from tests.admission.test_policy import add, admit_all, policy, waiter


def test_a_completed_streams_span_over_its_tokens_after_the_first_is_the_step() -> None:
    itl = InterTokenEstimate()
    assert itl.time_for(10) is None
    itl.learn(101, 101, 2.0)
    assert itl.seconds_per_token == pytest.approx(0.02)
    itl.learn(11, 11, 1.0)
    assert itl.seconds_per_token == pytest.approx(0.02 + 0.1 * (0.1 - 0.02))
    assert itl.time_for(100) == pytest.approx(100 * (0.02 + 0.1 * (0.1 - 0.02)))


def test_a_stream_of_one_token_teaches_nothing() -> None:
    itl = InterTokenEstimate()
    itl.learn(1, 1, 0.5)
    itl.learn(5, 5, 0.0)
    assert itl.seconds_per_token is None


def test_an_event_of_several_tokens_counts_as_what_completed_streams_carried() -> None:
    itl = InterTokenEstimate()
    for _ in range(50):
        itl.learn(200, 100, 1.0)
    assert itl.tokens_per_event == pytest.approx(2.0, rel=0.01)


def test_an_engines_estimate_is_learned_from_the_streams_its_lane_reports() -> None:
    p = policy(blocks=100, max_sequences=8)
    add(p, waiter(tokens=200, output=100))
    ((_, reservation),) = admit_all(p)
    KvLane(p, reservation).ended(tokens=51, events=40, seconds=1.0)
    budget = p.engines["e0"]
    assert budget.itl.seconds_per_token == pytest.approx(0.02)
    assert budget_status(budget)["inter_token_seconds"] == pytest.approx(0.02)
