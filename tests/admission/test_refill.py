"""The refill lead (``app.admission.refill``): sequences admitted beyond an
engine's cap so that a freed slot is refilled from the engine's own queue,
and how long before its end a stream hands its place on."""

import pytest

from app.admission.budget import BudgetConfig, EngineBudget
from app.admission.fairqueue import Waiter
from app.admission.refill import PATIENCE, RefillLead


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
