"""The output a key's requests are expected to write, learned from its
completed requests."""

from app.keys.output import MIN_SAMPLES, OutputEstimates


def test_the_worst_case_until_the_key_has_completed_requests() -> None:
    estimates = OutputEstimates()
    assert estimates.estimate("k", 20, 220) == 220
    for _ in range(MIN_SAMPLES - 1):
        estimates.observe("k", 50, 200)
    assert estimates.estimate("k", 20, 220) == 220
    estimates.observe("k", 50, 200)
    # A quarter of the allowance, on top of the prompt.
    assert estimates.estimate("k", 20, 220) == 20 + 50


def test_each_key_learns_its_own() -> None:
    estimates = OutputEstimates()
    for _ in range(MIN_SAMPLES):
        estimates.observe("short", 10, 100)
        estimates.observe("long", 100, 100)
    assert estimates.estimate("short", 0, 500) == 50
    assert estimates.estimate("long", 0, 500) == 500
    assert estimates.estimate("new", 0, 500) == 500


def test_recent_requests_weigh_more() -> None:
    estimates = OutputEstimates()
    for _ in range(50):
        estimates.observe("k", 100, 100)
    for _ in range(50):
        estimates.observe("k", 0, 100)
    # Mostly what the last requests wrote: 50 requests are 2.5 half-lives.
    assert estimates.estimate("k", 0, 1000) < 200


def test_the_estimate_stays_between_the_prompt_and_the_worst_case() -> None:
    estimates = OutputEstimates()
    for _ in range(MIN_SAMPLES):
        # More than the allowance (n > 1 counted against one sequence's) is
        # the whole allowance; an embedding (no allowance) teaches nothing.
        estimates.observe("k", 300, 100)
        estimates.observe("k", 5, 0)
    assert estimates.estimate("k", 10, 110) == 110
    assert estimates.estimate("k", 10, 10) == 10
