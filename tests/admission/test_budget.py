"""One engine's budget: charges, capacity, its sequence cap, what it opens to."""

from dataclasses import replace
from functools import partial

import pytest

from app.admission.budget import BudgetConfig, EngineBudget
from app.admission.estimate import PromptTokenEstimator
from app.admission.fairqueue import Waiter
from app.admission.recompute import EngineReading
from app.engine.view import FixedView
from app.request.validation import Limits, check_request
from app.routing.prefix_key import prompt_keys


def reading(
    preemptions: float, kv_usage: float, generated: float | None = None, running: float = 1
) -> EngineReading:
    return EngineReading(preemptions, generated, kv_usage, 10_000, running)


def budget(blocks: int | None = 10, block_size: int = 100, **config: float) -> EngineBudget:
    view = FixedView("e", routable=True)
    b = EngineBudget("e", BudgetConfig(**config), view)  # type: ignore[arg-type]
    if blocks is not None:
        # ``blocks`` the requests can hold, and the engine's null block.
        b.set_capacity(blocks + 1, block_size)
    return b


def waiter(
    tokens: int = 100,
    sequences: int = 1,
    seq_tokens: tuple[int, ...] = (),
    priority: str = "normal",
) -> Waiter:
    return Waiter("t", priority, tokens, arrival=0, sequences=sequences, seq_tokens=seq_tokens)


def test_demand_is_counted_in_whole_blocks_per_sequence() -> None:
    assert waiter(300).blocks(128) == 3
    assert waiter(256).blocks(128) == 2
    assert waiter(1).blocks(128) == 1
    # A batch of two prompts (100 and 300 tokens) with n = 2.
    assert waiter(800, 4, (100, 100, 300, 300)).blocks(128) == 1 + 1 + 3 + 3


def test_requests_are_admitted_while_their_blocks_fit() -> None:
    b = budget(blocks=10)
    held = [b.reserve(waiter(300), 0.0) for _ in range(3)]
    assert b.reserved_blocks == 9
    assert not b.fits(waiter(300), 0.0)
    b.release(held[0])
    assert b.fits(waiter(300), 0.0)


def test_an_oversized_request_runs_alone_rather_than_never() -> None:
    assert budget(blocks=10).fits(waiter(5000), 0.0)


def test_no_request_is_charged_more_than_half_the_budget_or_the_cap() -> None:
    b = budget(blocks=10, max_sequences=4)
    assert b.charged(waiter(5000)) == (5, 1)
    assert b.charged(waiter(800, 16)) == (5, 2)


def test_others_holdings_count_against_the_budget() -> None:
    b = budget(blocks=10)
    b.reserve(waiter(100), 0.0)
    b.others_blocks, b.others_in_flight = 8, 3
    assert not b.fits(waiter(200), 0.0)
    assert b.fits(waiter(100), 0.0)


def test_unknown_capacity_means_the_fallback_sequence_cap() -> None:
    b = budget(blocks=None, unknown_capacity_sequences=2)
    assert b.budget_blocks is None
    b.reserve(waiter(), 0.0)
    b.reserve(waiter(), 0.0)
    assert not b.fits(waiter(), 0.0)


def test_where_the_engine_orders_by_priority_lower_classes_do_not_hold_a_higher_one_back() -> None:
    """Low requests fill the budget: a high one still fits where the engine
    preempts the low ones for it, a low one does not; an engine that orders
    by arrival counts every block."""
    for by_priority, high_fits in ((True, True), (False, False)):
        b = budget(blocks=10, by_priority=by_priority, max_request_share=1.0)
        held = [b.reserve(waiter(300, priority="low"), 0.0) for _ in range(3)]
        assert not b.fits(waiter(300, priority="low"), 0.0)
        assert b.fits(waiter(300, priority="high"), 0.0) is high_fits
        b.reserve(waiter(300, priority="high"), 0.0)
        for reservation in held:
            b.release(reservation)
        assert b.reserved_by_rank == [3, 0, 0]
        # What the high class holds counts against the low one too.
        assert not b.fits(waiter(800, priority="low"), 0.0)
        assert b.fits(waiter(700, priority="low"), 0.0)


def test_a_persistent_queue_with_headroom_opens_the_budget_up_to_the_ceiling() -> None:
    b = budget(blocks=10, patience=2, step=0.1, preemption_budget=0)
    budgets = []
    for _ in range(10):
        b.observe(reading(0, 0.4), queued=True, ceiling=1.3)
        budgets.append(b.budget_blocks)
    assert budgets[0] == 10
    assert budgets[-1] == 13
    assert b.factor == pytest.approx(1.3)


def test_the_engines_sequence_cap_is_learned_from_its_own_queue() -> None:
    """Requests wait in the engine while its KV cache has room: it runs all
    it may, and what it runs is its cap from then on."""
    b = budget(blocks=100, max_sequences=256, patience=2)
    b.in_flight = 11  # the engine's requests are all the gateway's
    b.observe_queue(running=8, waiting=0, kv_usage=0.3)
    b.observe_queue(running=8, waiting=3, kv_usage=0.3)
    assert b.sequence_cap is None
    b.observe_queue(running=8, waiting=3, kv_usage=0.3)
    assert b.sequence_cap == 8
    assert b.max_sequences == 8
    # A full KV cache explains a waiting queue otherwise: nothing learned.
    c = budget(patience=1)
    c.observe_queue(running=5, waiting=9, kv_usage=0.99)
    assert c.sequence_cap is None


def test_a_burst_the_engine_is_still_taking_in_teaches_no_cap() -> None:
    """A burst arrives: requests wait in the engine while it prefills them a
    step at a time, and what it runs rises tick after tick. That wait is no
    cap; once what it runs stays level with requests still waiting, it is."""
    b = budget(blocks=100, max_sequences=256, patience=2)
    b.in_flight = 256
    for running in (20, 41, 54, 80, 101, 128):
        b.observe_queue(running=running, waiting=100, kv_usage=0.3)
        assert b.sequence_cap is None
    b.observe_queue(running=128, waiting=60, kv_usage=0.3)
    assert b.sequence_cap == 128


def test_a_prefix_requests_share_on_one_engine_is_counted_once() -> None:
    """A 1,000-token document in front of each question: the second request
    on the same engine is charged only what it does not share."""
    b = budget(blocks=100, block_size=100)
    document = tuple((piece, 250 * (i + 1)) for i, piece in enumerate((11, 12, 13, 14)))
    first = waiter(1100, seq_tokens=(1100,))
    first.prefix = document
    second = waiter(1100, seq_tokens=(1100,))
    second.prefix = document
    held = b.reserve(first, 0.0)
    assert held.blocks == 11
    assert b.charged(second) == (11 - 10, 1)
    other = waiter(1100, seq_tokens=(1100,))
    other.prefix = ((99, 250),)
    assert b.charged(other) == (11, 1)
    b.release(held)
    assert b.prefixes == {}
    assert b.charged(second) == (11, 1)


def test_a_prefix_of_token_ids_is_counted_exactly() -> None:
    """Prompts given as token ids: their pieces end at counted tokens, so two
    prompts that share 1,000 leading ids share exactly the blocks of them."""
    document = list(range(1000))

    def request(question: list[int]) -> Waiter:
        body = {"model": "m", "prompt": document + question, "max_tokens": 100}
        job = check_request("completions", body, {"m": None}, Limits(4, 4))
        w = waiter(1100, seq_tokens=(1100,))
        w.prefix = prompt_keys(job, partial(PromptTokenEstimator().estimate, job.route)).pieces
        return w

    first, second = request([7] * 100), request([8] * 100)
    assert first.prefix[:15] == second.prefix[:15]
    assert first.prefix[15][1] == 1024
    assert first.prefix[15] != second.prefix[15]
    b = budget(blocks=100, block_size=100)
    b.reserve(first, 0.0)
    # 960 tokens in whole shared pieces: 9 whole blocks of 100.
    assert b.charged(second) == (11 - 9, 1)


def test_prefix_awareness_can_be_turned_off() -> None:
    b = budget(blocks=100, block_size=100, prefix_aware=False)
    first = waiter(1100, seq_tokens=(1100,))
    first.prefix = ((1, 1000),)
    b.reserve(first, 0.0)
    assert b.charged(first) == (11, 1)


def test_by_priority_a_higher_class_is_not_paced_behind_lower_ones() -> None:
    """Low requests start paced on a cache that binds: the next start is a
    gap away. A high request starts at once where the engine preempts the
    low ones for it; one that orders by arrival keeps it to the pace, and a
    low one waits for the pace either way."""
    for by_priority, high_fits in ((True, True), (False, False)):
        b = budget(blocks=20, block_size=100, by_priority=by_priority, max_sequences=128)
        b.pace.completed_step = 0.01  # the engine's step is known
        low = replace(waiter(300, priority="low"), output=200)
        b.reserve(low, 0.0)
        assert b.pace.next_at > 0.0
        assert not b.fits(low, 0.0)
        high = replace(waiter(150, priority="high"), output=50)
        assert b.fits(high, 0.0) is high_fits
