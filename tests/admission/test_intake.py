"""What a refill takes to reach an engine (``app.admission.intake``): one
request's intake, measured per request, and how long before its end a
stream hands its place on — longer when a batch hands its places on at once."""

import pytest

from app.admission.intake import COHORT_SECONDS, FORGET_SECONDS, FORGET_SLICE, MARGIN, Intake


def test_nothing_measured_hands_nothing_on() -> None:
    intake = Intake()
    intake.admitted(0.0)
    assert intake.ahead(3.0, 0.0) == 0.0


def test_a_lone_stream_hands_on_the_margin_times_its_own_travel() -> None:
    intake = Intake()
    intake.admitted(10.0)
    intake.travelled(0.05, 10.0)
    assert intake.per_request == pytest.approx(0.05)
    assert intake.ahead(3.0, 10.0) == pytest.approx(MARGIN * 0.05)


def test_a_batch_admitted_at_once_measures_one_requests_intake() -> None:
    """128 admitted within 0.1 s, the engine taking them in 5 ms apart:
    each one's travel over those admitted before it within it is 5 ms."""
    intake = Intake()
    times = [0.1 * i / 128 for i in range(128)]
    for at in times:
        intake.admitted(at)
    for i, at in enumerate(times):
        intake.travelled(0.005 * (i + 1) + 0.1 - at, at)
    assert intake.per_request == pytest.approx(0.005, rel=0.2)


def test_the_places_handed_on_together_set_how_far_ahead() -> None:
    """The same intake: a stream admitted with 127 others hands on 128
    times as far ahead as a lone one would (at most the bound), and one
    admitted long after them counts none of them."""
    intake = Intake()
    for _ in range(128):
        intake.admitted(0.0)
    intake.travelled(0.005, 0.0)
    assert intake.together(0.0) == 128
    assert intake.ahead(10.0, 0.0) == pytest.approx(MARGIN * 0.005 * 128)
    assert intake.ahead(1.0, 0.0) == 1.0
    later = 2 * COHORT_SECONDS
    intake.admitted(later)
    assert intake.together(later) == 1
    assert intake.ahead(10.0, later) == pytest.approx(MARGIN * 0.005)


def test_admissions_around_a_stream_after_it_opened_count_too() -> None:
    """Read at each check: those admitted after it, within the window,
    are handed on with it."""
    intake = Intake()
    intake.admitted(0.0)
    intake.travelled(0.01, 0.0)
    before = intake.ahead(10.0, 0.0)
    for i in range(9):
        intake.admitted(0.1 * (i + 1))
    assert intake.ahead(10.0, 0.0) == pytest.approx(10 * before)


def test_admissions_long_past_are_forgotten() -> None:
    """A stream admitted long after a burst counts none of it, however
    large the burst was, and what is remembered stays bounded."""
    intake = Intake()
    for i in range(2 * FORGET_SLICE):
        intake.admitted(i * 0.001)
    far = 3 * FORGET_SECONDS
    intake.admitted(far)
    intake.travelled(0.01, far)
    assert intake.together(far) == 1
    assert intake.remembered == 1
