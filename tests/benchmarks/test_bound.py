"""The small cache's bound (``benchmarks.overhead.bound``): sequences that
start together against starts spread over a sequence's life. No engine."""

from benchmarks.overhead.bound import (
    admitted_paced,
    future_peak,
    held,
    mean_held,
    staggered,
    together,
)


def test_a_sequence_holds_a_block_more_each_block_of_tokens_it_writes() -> None:
    assert [held(83, g, 128) for g in (0, 44, 45, 172, 173, 255)] == [1, 1, 2, 2, 3, 3]


def test_by_hand_staggered_starts_run_more_than_starts_together() -> None:
    # Blocks of 2 tokens, no prompt, 4 tokens each: a sequence holds 1, 1, 2, 2.
    assert mean_held(2, 0, 4) == 1.5
    # Together, each needs 2 at its end: 3 fit in 6.
    assert together(6, 2, 0, 4) == 3
    # Spread over the four ages they hold 1 + 1 + 2 + 2 = 6 at every step;
    # a fifth would make 7 at some step.
    assert staggered(6, 2, 0, 4) == 4


def test_the_small_cache_cells_bound() -> None:
    # 48 blocks of 128 (47 usable), max_tokens 256, the benchmark's prompts of ~83 tokens.
    assert together(47, 128, 83, 256) == 15
    assert staggered(47, 128, 83, 256) == 21
    assert staggered(47, 128, 83, 256) <= 47 / mean_held(128, 83, 256) < 22


def test_the_future_peak_is_read_where_a_sequence_takes_a_block() -> None:
    # Holding 1, 1, 2, 2: ages 0 and 2 hold 1 + 2 now, 2 + 2 would need both at age 2 or 3.
    assert future_peak([0], 2, 0, 4) == 2
    assert future_peak([0, 2], 2, 0, 4) == 3
    assert future_peak([0, 0, 0], 2, 0, 4) == 6


def test_admitting_one_at_a_time_staggers_what_admitting_at_once_keeps_together() -> None:
    # At once: three start together, hold 6 at their end, and the next three
    # wait for them; one a step: four at ages 0-3 hold 6 at every step.
    assert admitted_paced(6, 2, 0, 4, gap=0, steps=400) == 3.0
    assert admitted_paced(6, 2, 0, 4, gap=1, steps=400) > 3.9
