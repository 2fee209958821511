"""The refill lead (``app.admission.refill``): sequences admitted beyond an
engine's cap so that a freed slot is refilled from the engine's own queue,
and how long before its end a stream hands its place on."""

import pytest

from app.admission.budget import BudgetConfig, EngineBudget, RunningStream
from app.admission.fairqueue import Waiter
from app.admission.refill import PATIENCE, HandingOn, RefillLead, due
from tests.admission.test_policy import add, admit_all, policy, waiter


def ticks(lead: RefillLead, n: int, running: float, waiting: float = 0) -> None:
    for _ in range(n):
        lead.observe(128, running=running, waiting=waiting, queued=True, at_cap=True)


def test_empty_slots_with_work_queued_here_grow_the_lead_up_to_its_bound() -> None:
    lead = RefillLead(max_lead=16)
    ticks(lead, PATIENCE, running=112)
    assert lead.lead == 8
    ticks(lead, PATIENCE, running=120)
    assert lead.lead == 12
    ticks(lead, 10 * PATIENCE, running=100)
    assert lead.lead == 16


def test_one_tick_of_empty_slots_proves_nothing() -> None:
    """A request admitted a moment ago may still be on its way."""
    lead = RefillLead(max_lead=16)
    ticks(lead, PATIENCE - 1, running=0)
    ticks(lead, 1, running=128)
    ticks(lead, PATIENCE - 1, running=0)
    assert lead.lead == 0


def test_empty_slots_say_nothing_when_the_kv_budget_holds_requests_back() -> None:
    lead = RefillLead(max_lead=16)
    lead.observe(128, running=40, waiting=0, queued=True, at_cap=False)
    assert lead.lead == 0


def test_an_engine_queue_deeper_than_the_refill_needs_shrinks_the_lead_slowly() -> None:
    lead = RefillLead(max_lead=16)
    ticks(lead, PATIENCE, running=108)
    assert lead.lead == 10
    for _ in range(PATIENCE - 1):
        lead.observe(128, running=128, waiting=6, queued=True, at_cap=True)
    assert lead.lead == 10
    lead.observe(128, running=128, waiting=6, queued=True, at_cap=True)
    assert lead.lead == 9


def test_the_lead_decays_once_nothing_waits_in_the_gateway() -> None:
    lead = RefillLead(max_lead=16)
    ticks(lead, PATIENCE, running=120)
    for _ in range(3):
        lead.observe(128, running=90, waiting=0, queued=False, at_cap=False)
    assert lead.lead == 1


def test_the_engine_is_refilled_from_its_own_queue_once_slots_sat_empty() -> None:
    """The budget admits beyond the engine's learned cap by the lead, and
    no further: the excess still waits in the gateway's queue."""
    budget = EngineBudget("e", BudgetConfig(max_sequences=256, max_lead=16))
    budget.set_capacity(16_384, 16)
    budget.sequence_cap = 128
    for _ in range(128):
        budget.reserve(Waiter("t", "normal", 100, 0.0), 0.0)
    assert not budget.fits(Waiter("t", "normal", 100, 0.0), 0.0)
    # Under overload, the engine runs 116 of its 128 with nothing of its own waiting.
    for _ in range(PATIENCE):
        budget.observe_queue(running=116, waiting=0, kv_usage=0.1, queued=True)
    assert budget.refill.lead == 6
    assert budget.max_sequences == 134
    admitted = 0
    while budget.fits(waiter := Waiter("t", "normal", 100, 0.0), 0.0):
        budget.reserve(waiter, 0.0)
        admitted += 1
    assert admitted == 6


def test_a_budget_with_no_lead_allowed_stays_at_the_engines_cap() -> None:
    budget = EngineBudget("e", BudgetConfig(max_sequences=128, max_lead=0))
    budget.set_capacity(16_384, 16)
    for _ in range(128):
        budget.reserve(Waiter("t", "normal", 100, 0.0), 0.0)
    for _ in range(PATIENCE):
        budget.observe_queue(running=100, waiting=0, kv_usage=0.1, queued=True)
    assert budget.max_sequences == 128


def test_tokens_per_event_follow_what_completed_streams_carried() -> None:
    """One token an event until a stream says otherwise; 256 tokens in 200
    events make the mean 1.28, and nothing below one token an event (or a
    stream with no events) counts."""
    lead = RefillLead(max_lead=16)
    assert lead.tokens_per_event == 1.0
    lead.streamed(256, 0)
    lead.streamed(100, 200)
    assert lead.tokens_per_event == 1.0
    for _ in range(100):
        lead.streamed(256, 200)
    assert lead.tokens_per_event == pytest.approx(1.28)


def test_the_first_streams_teach_their_plain_mean_and_later_ones_a_tenth() -> None:
    """The first completed stream says what an event carries at once (a
    fresh gateway's second batch counts with it), the first ten are
    averaged, and from then on each moves the mean a tenth of the way."""
    lead = RefillLead(max_lead=16)
    lead.streamed(300, 200)
    assert lead.carried() == pytest.approx(1.5)
    lead.streamed(200, 200)
    assert lead.carried() == pytest.approx(1.25)
    for _ in range(8):
        lead.streamed(250, 200)
    assert lead.carried() == pytest.approx(1.25)
    lead.streamed(450, 200)
    assert lead.carried() == pytest.approx(1.25 + 0.1 * (2.25 - 1.25))


# --- when a stream hands its place on (``due``), sampled -------------------------


def steady(bound: int, per_event: float, gap: float, ahead: float) -> int | None:
    """The event (from 1) at which a steady stream of ``per_event`` tokens
    every ``gap`` seconds is first due within ``ahead`` of ``bound``."""
    for events in range(1, 10_000):
        sent = events * per_event
        if due(bound, sent, events, (events - 1) * gap, ahead):
            return events
    return None


def test_a_stream_is_due_when_its_bound_is_within_the_time_ahead() -> None:
    """One token every 0.1 s toward a bound of 100: due within 1 s from the
    90th on (10 left), not at the 89th."""
    assert steady(100, 1, 0.1, 1.0) == 90


def test_first_tokens_read_together_give_no_pace() -> None:
    """Ten tokens in one read say nothing of the pace: not due until it was
    measured over half the time ahead."""
    assert not due(100, 10, 10, 0.0, 1.0)
    assert not due(100, 14, 14, 0.4, 1.0)


def test_events_carrying_several_tokens_are_counted_as_such() -> None:
    """Two tokens an event, one every 0.2 s, toward 100 tokens: due at the
    45th event (10 tokens left); counted one an event, never before its end."""
    assert steady(100, 2, 0.2, 1.0) == 45
    assert steady(100, 1, 0.2, 1.0) == 95


def test_a_stream_with_no_time_ahead_is_never_due() -> None:
    assert not due(3, 3, 3, 0.2, 0.0)


class Gauge:
    """A stream as the relay shows it (``app.relay.lane.StreamGauge``)."""

    def __init__(self, first: float) -> None:
        self.events = 0
        self.counted_tokens: float | None = None
        self.first_token_at: float | None = first


def test_the_running_streams_are_sampled_for_their_hand_on_not_told_per_event() -> None:
    """Two streams toward 100 tokens, one token every 0.1 s: sampled at 8.9 s,
    the one at 90 tokens is due, the one at 50 is not; one handed on is not
    due again."""
    p = policy(blocks=100, max_sequences=8, max_lead=0)
    for _ in range(2):
        add(p, waiter(tokens=200, output=100))
    reservations = [r for _, r in admit_all(p)]
    gauges = []
    for reservation, sent in zip(reservations, (90, 50), strict=True):
        gauge = Gauge(first=0.0)
        gauge.events = sent
        reservation.stream = RunningStream(gauge, HandingOn(ahead=lambda: 1.0))
        gauges.append(gauge)
    gauges[1].first_token_at = 4.0
    assert p.streams_due(8.9) == [reservations[0]]
    assert p.hand_on(reservations[0])
    assert p.streams_due(8.9) == []
