"""The overload benchmark's first batch (``benchmarks.overhead.first_batch``):
which streams it is, what their events carried, the engine core's CPU per
token, and the table over the rounds. No engine."""

from typing import Any

from benchmarks.overhead.first_batch import (
    before_its_end,
    core_ms_per_100_tokens,
    first_batch,
    first_batch_table,
    tokens_per_event,
)
from tests.benchmarks.calls import call


def test_the_first_batch_is_the_streams_whose_first_tokens_came_first() -> None:
    served = []
    for i in range(4):
        c = call(i, 0.0, 200)
        c.first_token, c.finished = 10.0 + i, 20.0 + i
        # 200 tokens in 100, 50, 40, 25 events.
        c.completion_tokens, c.events = 200, (100, 50, 40, 25)[i]
        served.append(c)
    late = call(4, 0.0, 200)
    late.first_token, late.finished = 30.0, 31.0
    # t=0 at 9: the first three got first tokens 1, 2, 3 s in and ended 11-13 s in.
    assert first_batch([late, *served], 9.0, 3) == {
        "first_token_p50": 2.0,
        "first_token_max": 3.0,
        "end_p50": 12.0,
        # 600 tokens in 190 events.
        "tokens_per_event": round(600 / 190, 3),
    }
    assert first_batch(served[:2], 9.0, 3) is None


def test_tokens_per_event_is_what_the_streams_events_carried_on_average() -> None:
    merged, single, empty = call(0, 0.0, 200), call(1, 0.0, 200), call(2, 0.0, 200)
    merged.completion_tokens, merged.events = 256, 64
    single.completion_tokens, single.events = 256, 256
    assert tokens_per_event([merged, single, empty]) == round(512 / 320, 3)
    assert tokens_per_event([empty]) == 0.0


def test_the_engine_cores_cpu_per_token_is_over_what_the_engine_generated() -> None:
    # 2 s of the engine core's CPU over 10 s at 1,000 tokens a second: 0.2 ms
    # a token, 20 ms per 100.
    r: dict[str, Any] = {
        "engine_cpu_settled": {"wall_s": 10.0, "api_s": 1.0, "core_s": 2.0, "others_s": 0.0},
        "engine_tokens_per_s": 1000.0,
    }
    assert core_ms_per_100_tokens(r) == 20.0
    assert core_ms_per_100_tokens({"engine_cpu_settled": None}) is None
    assert core_ms_per_100_tokens({**r, "engine_tokens_per_s": None}) is None


def test_the_table_gives_each_target_its_rounds_medians() -> None:
    def round_of(target: str, end: float, api: float, core: float) -> dict[str, Any]:
        return {
            "target": target,
            "first_batch": {
                "first_token_p50": 0.4,
                "first_token_max": 0.5,
                "end_p50": end,
                "tokens_per_event": 1.25,
            },
            "engine_cpu_first_batch": {
                "wall_s": end,
                "api_s": api,
                "core_s": core,
                "others_s": 0.0,
                "core_gave_up": 10,
                "core_preempted": 300,
            },
            "engine_cpu_settled": {"wall_s": 10.0, "api_s": 4.0, "core_s": 5.0, "others_s": 0.1},
            "engine_tokens_per_s": 1000.0,
        }

    text = first_batch_table(
        [
            round_of("direct", 4.0, 1.8, 2.2),
            round_of("direct", 4.4, 2.0, 2.4),
            round_of("direct", 4.2, 1.9, 2.3),
            round_of("makeup", 5.0, 2.2, 2.8),
        ]
    )
    _, _, direct, makeup = text.splitlines()
    # Direct's end is the median of its three rounds, with their range; the
    # API server's share settled 0.40, the engine core 50 ms per 100 tokens.
    assert "| 4.20 (4.00–4.40) |" in direct
    assert "1.90 (1.80–2.00) / 2.30 (2.20–2.40) / 0.00" in direct
    # No readings kept: nothing said of the batch's last seconds.
    assert direct.endswith("| 300 | - | 0.40 | 50.00 |")
    assert "| 5.00 |" in makeup


def test_the_batchs_last_seconds_are_read_from_the_kept_readings() -> None:
    # Readings every 0.5 s from t=0: the API server 0.2 s and the engine
    # core 0.3 s of CPU every half second (its tree 0.5 s).
    rows = [[i * 0.5, i * 0.2, i * 0.5, i * 0.5, 0, 0] for i in range(13)]
    r = {"first_batch": {"end_p50": 5.0}, "engine_cpu_readings": rows}
    # From the reading at 3.5 s to the one at 5.0 s.
    assert before_its_end(r) == {
        "wall_s": 1.5,
        "api_s": 0.6,
        "core_s": 0.9,
        "others_s": 0.0,
        "core_gave_up": 0,
        "core_preempted": 0,
        # Readings kept before the workers were read: none counted.
        "workers_s": 0.0,
    }
    assert before_its_end({"first_batch": {"end_p50": 5.0}}) is None
    assert before_its_end({"first_batch": None, "engine_cpu_readings": rows}) is None
