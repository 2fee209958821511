"""Reading where an engine ran short of its cap from the gateway's request
log (``benchmarks.overhead.turnover``). No engine: records built here."""

import json

import pytest

from benchmarks.overhead.turnover import first_turnover, short, streams


def record(arrival: float, queue: float, ttft: float, total: float, status: int = 200) -> str:
    return json.dumps(
        {
            "arrival_ts": 1000.0 + arrival,
            "queue_s": queue,
            "ttft_s": ttft,
            "total_s": total,
            "status": status,
            "outcome": "completed" if status == 200 else "rejected",
        }
    )


def test_a_late_first_turnover_is_read_from_the_log() -> None:
    """Four streams admitted at once end at 5 s; their four successors,
    waiting since t=0, were handed the places at 4.5 s and started at 5.5 s:
    half a second ahead, half a second late, and the engine short of its
    four sequences for that half second (2 sequence-seconds)."""
    batch = [record(0.0, 0.0, 0.1, 5.0) for _ in range(4)]
    successors = [record(0.0, 4.5, 5.5, 10.0) for _ in range(4)]
    refused = [record(0.0, 0.0, 0.0, 0.0, status=429)]
    found = streams(["a line of the server's own", *batch, *successors, *refused])
    assert len(found) == 8
    turn = first_turnover(found, cap=4)
    assert turn["batch"] == 4
    assert turn["batch_end"] == pytest.approx(5.0)
    assert turn["handed_on_ahead"] == pytest.approx(0.5)
    assert turn["successors_start_after"] == pytest.approx(0.5)
    # One step of 0.05 s at most either side of each edge.
    assert turn["short_sequence_seconds"] == pytest.approx(2.0, abs=4 * 0.05)
    # From 5 s to 20 s: the half second, then nothing runs after 10 s.
    assert short(found, 4, 5.0, 20.0, 0.05) == pytest.approx(2.0 + 40.0, abs=2 * 4 * 0.05)


def test_successors_in_the_engines_queue_in_time_leave_no_gap() -> None:
    batch = [record(0.0, 0.0, 0.1, 5.0) for _ in range(4)]
    successors = [record(0.0, 3.0, 5.0, 10.0) for _ in range(4)]
    turn = first_turnover(streams([*batch, *successors]), cap=4)
    assert turn["handed_on_ahead"] == pytest.approx(2.0)
    assert turn["successors_start_after"] == pytest.approx(0.0)
    assert turn["short_sequence_seconds"] == pytest.approx(0.0, abs=4 * 0.05)
