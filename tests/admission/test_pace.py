"""Paced starts (``app.admission.pace``): the cache's future peak by hand, the
gap and the step, and the policy on a small cache driven step by step by a
simulated engine, paced and not."""

from dataclasses import dataclass, replace

import pytest

from app.admission.budget import BudgetConfig
from app.admission.pace import (
    AHEAD,
    CATCH_UP,
    Life,
    Open,
    PacedStarts,
    Span,
    future_peak,
    gap_steps,
    held,
)
from app.admission.policy import AdmissionPolicy, PolicyConfig, Reservation, Waiter
from app.engine.view import FixedView

# The overload benchmark's small cache: 47 usable blocks of 128, prompts of
# about 84 tokens, max_tokens 256 (1, 2 then 3 blocks over a life).
BLOCK, USABLE = 128, 47
LIFE = Life(84, 256)


def test_a_new_sequence_peaks_at_its_end() -> None:
    assert future_peak([Span(LIFE)], BLOCK) == 3
    assert [held(84, g, BLOCK) for g in (0, 43, 44, 171, 172, 255)] == [1, 1, 2, 2, 3, 3]


def test_a_sequence_that_ends_first_frees_its_blocks_for_a_later_one() -> None:
    # At 200 tokens it holds 3 for 56 more steps; a new one takes its second
    # block 44 steps from now, while the old one still holds its three.
    assert future_peak([Span(LIFE, 200, 200), Span(LIFE)], BLOCK) == 5
    # At 220 it ends 36 steps from now, before the new one's second block.
    assert future_peak([Span(LIFE, 220, 220), Span(LIFE)], BLOCK) == 4


def test_blocks_taken_in_the_step_others_free_theirs_count_first() -> None:
    # The old one ends 44 steps from now, the step the new one takes its second.
    assert future_peak([Span(LIFE, 212, 212), Span(LIFE)], BLOCK) == 5
    assert future_peak([Span(LIFE, 213, 213), Span(LIFE)], BLOCK) == 4


def test_a_span_takes_blocks_as_its_furthest_and_frees_them_as_its_least() -> None:
    # At 160 tokens a sequence holds 2 blocks and takes its third in 12
    # steps, after one at 250 (3 blocks) has ended in 6: at most 5 at once.
    assert future_peak([Span(LIFE, 160, 160), Span(LIFE, 250, 250)], BLOCK) == 5
    # Seen between 160 and 172, it may hold its third already.
    assert future_peak([Span(LIFE, 172, 160), Span(LIFE, 250, 250)], BLOCK) == 6
    # Seen between 212 and 213, it may still hold its three when a new one
    # takes its second, 44 steps on.
    assert future_peak([Span(LIFE, 213, 212), Span(LIFE)], BLOCK) == 5


def test_sequences_started_together_peak_together() -> None:
    assert future_peak([Span(LIFE)] * 15, BLOCK) == 45
    assert future_peak([Span(LIFE)] * 16, BLOCK) > USABLE


def test_the_gap_is_a_life_over_what_the_budget_holds_on_average() -> None:
    # 44 steps of 1 block, 128 of 2, 84 of 3: 552 block-steps a life.
    assert gap_steps(LIFE, BLOCK, USABLE) == pytest.approx(552 / 47)


def _running(paced: PacedStarts, seconds: float, written: float) -> Open:
    entry = Open((LIFE,), admitted_at=0.0, progress=lambda: (written, seconds))
    paced.open.append(entry)
    return entry


def test_no_clock_until_a_stream_has_run_long_enough_to_show_the_step() -> None:
    paced = PacedStarts()
    assert paced.fits((LIFE,), USABLE, BLOCK, now=0.0) is None
    _running(paced, seconds=0.01, written=4)
    assert paced.fits((LIFE,), USABLE, BLOCK, now=0.0) is None
    _running(paced, seconds=0.05, written=10)
    assert paced.step() == pytest.approx(0.005)
    assert paced.fits((LIFE,), USABLE, BLOCK, now=0.0) is True


def test_a_completed_stream_sets_the_step() -> None:
    paced = PacedStarts()
    entry = _running(paced, seconds=2.55, written=250)
    _running(paced, seconds=1.0, written=10)
    paced.completed(entry, tokens=256)
    assert paced.step() == pytest.approx(0.01)


def test_the_next_start_is_a_gap_on_and_lateness_is_made_up_within_bounds() -> None:
    paced = PacedStarts()
    _running(paced, seconds=0.5, written=100)  # 5 ms a step
    gap = gap_steps(LIFE, BLOCK, USABLE) * 0.005
    paced.next_at = 10.0
    paced.started(Open((LIFE,), admitted_at=10.0), USABLE, BLOCK)
    assert paced.next_at == pytest.approx(10.0 + gap)
    assert paced.fits((LIFE,), USABLE, BLOCK, now=10.0 + gap / 2) is False
    # Started a little late: the one after is still due a gap after this was.
    paced.started(Open((LIFE,), admitted_at=10.0 + 1.5 * gap), USABLE, BLOCK)
    assert paced.next_at == pytest.approx(10.0 + 2 * gap)
    # Started far too late: at most CATCH_UP gaps are made up.
    paced.started(Open((LIFE,), admitted_at=20.0), USABLE, BLOCK)
    assert paced.next_at == pytest.approx(20.0 - CATCH_UP * gap + gap)


def test_one_admitted_but_not_yet_seen_counts_from_its_admission() -> None:
    paced = PacedStarts()
    _running(paced, seconds=0.5, written=100)
    paced.open.append(Open((LIFE,), admitted_at=9.0))
    spans = paced.spans(now=10.0, step=0.005)
    assert spans[1] == Span(LIFE, 200 + AHEAD, 0.0)
    assert spans[0] == Span(LIFE, 100 + AHEAD, 100)


# --- the policy on a small cache, driven by a simulated engine --------------


@dataclass(eq=False)
class _Sequence:
    reservation: Reservation
    starts: int  # the step it starts at in the engine
    written: int = 0


def _run(paced: bool, steps: int = 3000, step_seconds: float = 0.005) -> tuple[float, int]:
    """The engine's mean running sequences after the first lives, and the
    most blocks they held at any step: 256 users each asking again as soon
    as they are answered, every admission reaching the engine 3 steps later,
    every running sequence writing a token a step, its stream read a step
    behind."""
    p = AdmissionPolicy(PolicyConfig(budget=BudgetConfig(max_sequences=128, paced_starts=paced)))
    engine = p.add_engine(FixedView("e0", routable=True, models=frozenset({"m"})))
    engine.set_capacity(USABLE + 1, BLOCK)
    tokens = LIFE.prompt + LIFE.output
    for _ in range(256):
        w = Waiter("t", "normal", tokens, arrival=0.0, deadline=1e9, model="m", output=LIFE.output)
        p.enqueue(w, now=0.0)
    running: list[_Sequence] = []
    counted, most = 0, 0
    for step in range(steps):
        now = step * step_seconds
        admitted, _ = p.pop_admissible(now)
        for _, reservation in admitted:
            sequence = _Sequence(reservation, starts=step + 3)

            def progress(s: _Sequence = sequence) -> tuple[float, float] | None:
                seen = s.written - 1  # read a step behind
                if seen < 1:
                    return None
                return float(seen), seen * step_seconds

            if reservation.paced is not None:
                reservation.paced.progress = progress
            running.append(sequence)
        live = [s for s in running if s.starts <= step]
        most = max(most, sum(held(LIFE.prompt, s.written, BLOCK) for s in live))
        if step >= 1000:
            counted += len(live)
        for s in live:
            s.written += 1
            if s.written == LIFE.output:
                if s.reservation.paced is not None:
                    p.engines[s.reservation.engine].pace.completed(s.reservation.paced, LIFE.output)
                p.release(s.reservation)
                running.remove(s)
                w = Waiter("t", "normal", tokens, arrival=now, deadline=1e9, model="m")
                p.enqueue(replace(w, output=LIFE.output), now=now)
    return counted / (steps - 1000), most


def test_paced_starts_run_more_sequences_on_a_small_cache_without_overfilling_it() -> None:
    paced, paced_most = _run(paced=True)
    reserved, reserved_most = _run(paced=False)
    # Reserved at their worst case, 15 run (47 // 3); paced, their peaks
    # spread (the bound is 21).
    assert reserved == pytest.approx(15, abs=0.5)
    assert paced >= reserved + 2.5
    assert paced_most <= USABLE
    assert reserved_most <= USABLE


def test_only_an_engine_whose_cache_binds_first_is_paced() -> None:
    def engine(blocks: int, cap: int):  # type: ignore[no-untyped-def]
        p = AdmissionPolicy(PolicyConfig(budget=BudgetConfig(max_sequences=cap)))
        budget = p.add_engine(FixedView("e0", routable=True, models=frozenset({"m"})))
        budget.set_capacity(blocks + 1, BLOCK)
        return budget

    # 47 blocks hold 15 at their worst: below a cap of 128, not of 8.
    assert engine(USABLE, 128).paces((LIFE,), USABLE)
    assert not engine(USABLE, 8).paces((LIFE,), USABLE)
    # A large cache holds thousands: its sequence cap binds.
    assert not engine(16_383, 128).paces((LIFE,), 16_383)
    # Without max_tokens there is no life to pace by.
    assert not engine(USABLE, 128).paces((), USABLE)
    # Switched off.
    off = AdmissionPolicy(PolicyConfig(budget=BudgetConfig(max_sequences=128, paced_starts=False)))
    budget = off.add_engine(FixedView("e0", routable=True, models=frozenset({"m"})))
    budget.set_capacity(USABLE + 1, BLOCK)
    assert not budget.paces((LIFE,), USABLE)
