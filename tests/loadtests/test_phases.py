"""The phase detector on synthetic step tables."""

import pytest

from loadtests.phases import Step, detect_phases

USERS = [1, 2, 4, 8, 16, 32, 64]


def table(knee_at: int | None, tokens: list[float] | None = None) -> list[Step]:
    """Steps that are graceful before ``knee_at`` and preempt from it on."""
    steps = []
    for i, users in enumerate(USERS):
        past = knee_at is not None and i >= knee_at
        steps.append(
            Step(
                users=users,
                seconds=15,
                tokens_per_s=(tokens[i] if tokens else 600.0 * min(users, 8)),
                preemptions=5.0 * i if past else 0.0,
                waiting_share=0.9 if past else 0.0,
            )
        )
    return steps


@pytest.mark.parametrize("knee", [1, 3, 4, 6])
def test_the_knee_is_the_first_step_past_it(knee: int) -> None:
    phases = detect_phases(table(knee))
    assert phases.knee == knee
    assert phases.graceful == list(range(knee))
    assert phases.preempting == list(range(knee, len(USERS)))


def test_no_knee_when_the_engine_never_struggles() -> None:
    phases = detect_phases(table(None))
    assert phases.knee is None
    assert phases.graceful == list(range(len(USERS)))
    assert phases.preempting == []


def test_a_persistent_waiting_queue_alone_is_past_the_knee() -> None:
    steps = table(None)
    steps[5].waiting_share = 0.6
    steps[4].waiting_share = 0.2  # a passing queue is not the knee
    phases = detect_phases(steps)
    assert phases.knee == 5
    assert phases.preempting == []


def test_the_throughput_plateau_is_found() -> None:
    # A noisy dip early on is not the plateau; 3,600 is within 10% of 3,900.
    phases = detect_phases(table(5, tokens=[600, 620, 2400, 3600, 3800, 3900, 2500]))
    assert phases.saturation == 3


def test_the_gateway_holding_load_back_is_named() -> None:
    steps = table(None)
    steps[5].gateway_queue_share = 0.8
    steps[6].refused = 12
    assert detect_phases(steps).gateway_holding == [5, 6]
