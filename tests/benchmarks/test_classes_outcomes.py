"""The classes benchmark's definitions (``benchmarks.classes.outcomes``):
met, attainment, goodput and TTFT percentiles with refusals as misses. No
engine."""

import math

from benchmarks.classes.outcomes import CUT, kind_figures, outcome, run_figures, ttft_or_inf
from benchmarks.harness import Call


def call(
    status: int,
    ttft: float | None = None,
    tokens: int = 0,
    finished: float = 5.0,
    code: str = "",
    label: str = "chat",
) -> Call:
    c = Call(status=status, started=0.0, finished=finished)
    c.first_token = None if ttft is None else ttft
    c.completion_tokens = tokens
    c.error_code = code
    c.label = label
    return c


def test_met_is_completed_within_the_objective() -> None:
    assert outcome(call(200, 0.9, 10), 1.0) == "met"
    assert outcome(call(200, 1.0, 10), 1.0) == "met"
    assert outcome(call(200, 1.1, 10), 1.0) == "late"


def test_refused_evicted_failed_and_cut_are_told_apart() -> None:
    assert outcome(call(429, code="over_capacity"), 1.0) == "refused"
    assert outcome(call(429, code="evicted"), 1.0) == "evicted"
    # Evicted mid-stream: a 200 head, a first token, then the error event.
    assert outcome(call(-2, 0.1, code="evicted"), 1.0) == "evicted"
    assert outcome(call(-2, 0.1), 1.0) == "failed"
    assert outcome(call(503), 1.0) == "failed"
    assert outcome(call(CUT), 1.0) == "cut"


def test_a_request_without_a_first_token_counts_as_infinite_ttft() -> None:
    assert ttft_or_inf(call(429)) == math.inf
    assert ttft_or_inf(call(200, 0.25, 1)) == 0.25


def test_attainment_counts_every_miss_against_what_was_sent() -> None:
    calls = [call(200, 0.5, 10), call(200, 0.5, 10), call(200, 3.0, 10), call(429)]
    f = kind_figures(calls, 1.0, t0=0.0, load_s=10.0, window_s=20.0)
    assert (f.sent, f.met, f.late, f.refused) == (4, 2, 1, 1)
    assert f.attainment == 0.5
    # Of the three the target took, two met.
    assert f.admitted_attainment == 2 / 3


def test_a_refusal_never_improves_a_percentile() -> None:
    fast = [call(200, 0.1, 10) for _ in range(98)]
    served = kind_figures(fast, 1.0, t0=0.0, load_s=10.0, window_s=20.0)
    f = kind_figures([*fast, call(429), call(429)], 1.0, t0=0.0, load_s=10.0, window_s=20.0)
    assert served.ttft_p99 == 0.1
    assert f.ttft_p50 == 0.1
    assert f.ttft_p99 == math.inf


def test_goodput_counts_met_requests_that_ended_inside_the_window() -> None:
    calls = [
        call(200, 0.5, 100, finished=5.0),
        call(200, 0.5, 100, finished=25.0),  # met, but ended after the window
        call(200, 2.0, 100, finished=5.0),  # late
    ]
    f = kind_figures(calls, 1.0, t0=0.0, load_s=10.0, window_s=20.0)
    assert f.goodput_tokens == 100
    assert f.goodput_per_s == 5.0
    assert f.output_tokens == 200


def test_the_total_judges_each_request_by_its_own_kind() -> None:
    calls = [
        call(200, 2.0, 10, label="bulk"),  # met against bulk's 30 s
        call(200, 2.0, 10, label="chat"),  # late against chat's 1 s
        call(429, label="chat"),
    ]
    figures = run_figures(calls, {"chat": 1.0, "bulk": 30.0}, 0.0, 10.0, 40.0)
    assert figures["chat"].met == 0
    assert figures["bulk"].met == 1
    total = figures["total"]
    assert (total.sent, total.met, total.refused) == (3, 1, 1)
    assert total.attainment == 1 / 3
    assert total.ttft_p99 is None


def test_a_kind_with_nothing_sent_has_no_attainment() -> None:
    f = run_figures([], {"chat": 1.0}, 0.0, 10.0, 20.0)["chat"]
    assert f.sent == 0
    assert f.attainment is None
