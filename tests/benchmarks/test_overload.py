"""The overload benchmark's own arithmetic (``benchmarks.overhead``): the
after-the-fact check of refusals and the rounds' table. No engine."""

import argparse

from app.observe.promtext import Sample
from benchmarks.harness import Call
from benchmarks.harness.measure import Sampler
from benchmarks.overhead.overload import (
    GENERATED,
    came_back,
    deadline_of,
    in_time,
)
from benchmarks.overhead.tables import overload_table
from tests.benchmarks.calls import call


def test_a_refusal_counts_as_true_when_its_user_came_back_and_was_admitted() -> None:
    calls = [
        call(0, 0.0, 429),
        call(0, 2.0, 200),
        call(1, 0.1, 429),
        call(1, 0.2, 429),
        call(1, 0.3, 200),
        call(2, 0.0, 429),  # the run ended before it came back
    ]
    assert came_back(calls) == (3, 2)


def row(target: str, repeat: int, tps: float, **more: object) -> dict[str, object]:
    return {
        "target": target,
        "repeat": repeat,
        "client": "immediate",
        "tokens_per_s_all": tps,
        "served": 10,
        "rejected_429": 0,
        "ttft_p99_all": 1.0,
        "ttft_p99": 1.0,
        "engine_running_mean": 120.0,
        "preemptions": 0,
        **more,
    }


def test_the_ratio_is_paired_with_direct_in_the_same_round() -> None:
    results = [
        row("direct", 0, 1000.0),
        row("on", 0, 900.0),
        row("direct", 1, 500.0),
        row("on", 1, 500.0),
        row("direct", 2, 800.0),
        row("on", 2, 720.0),
    ]
    lines = overload_table(results).splitlines()
    gateway = next(line for line in lines if "admission on" in line)
    # 0.9, 1.0, 0.9 paired; unpaired medians would say 720 / 800 = 0.9 too,
    # but the spread only shows paired: 0.90 (0.90–1.00).
    assert "0.90 (0.90–1.00)" in gateway
    direct = next(line for line in lines if "vLLM direct" in line)
    # Direct's noise band: its rounds around their median (800).
    assert "1.00 (0.62–1.25)" in direct


def test_a_request_is_in_time_when_its_first_token_came_within_the_deadline() -> None:
    served = [Call(status=200, started=0.0, first_token=t) for t in (0.5, 5.0, 5.01, 9.0)]
    refused = Call(status=429, started=0.0)
    no_token = Call(status=200, started=0.0)  # served, but no token ever came
    assert in_time([*served, refused, no_token], 5.0) == (2, 3)


def test_the_deadline_is_the_gateways_queue_timeout_as_the_run_sets_it() -> None:
    def args(*env: str) -> argparse.Namespace:
        return argparse.Namespace(gateway_env=list(env))

    assert deadline_of(args("GATEWAY_MAX_CONCURRENCY=128", "GATEWAY_QUEUE_TIMEOUT=5")) == 5.0
    # Unset: the setting's default, 30 s.
    assert deadline_of(args("GATEWAY_MAX_CONCURRENCY=128")) == 30.0


def test_in_time_is_paired_with_direct_in_the_same_round() -> None:
    results = [
        row("direct", 0, 1000.0, in_time=100, late=20),
        row("makeup", 0, 900.0, in_time=110, late=0, rejected_429=30),
        row("direct", 1, 1000.0, in_time=200, late=0),
        row("makeup", 1, 900.0, in_time=180, late=2),
    ]
    lines = overload_table(results).splitlines()
    gateway = next(line for line in lines if "make up" in line)
    # 110 / 100 and 180 / 200, not the sums' 290 / 300.
    assert "290 / 2 (1.00 (0.90–1.10))" in gateway
    direct = next(line for line in lines if "vLLM direct" in line)
    assert "300 / 20 (1.00)" in direct


def test_the_engines_own_rate_is_paired_with_direct_in_the_same_round() -> None:
    results = [
        row("direct", 0, 1000.0, engine_tokens_per_s=1000.0, engine_tokens_per_s_all=950.0),
        row("on", 0, 900.0, engine_tokens_per_s=980.0, engine_tokens_per_s_all=855.0),
        row("direct", 1, 500.0, engine_tokens_per_s=500.0, engine_tokens_per_s_all=480.0),
        row("on", 1, 450.0, engine_tokens_per_s=500.0, engine_tokens_per_s_all=432.0),
    ]
    gateway = next(line for line in overload_table(results).splitlines() if "admission on" in line)
    # The client received 0.90x direct's while the engine generated 0.98x
    # and 1.00x settled, 0.90x from t=0: the gap is the engine's, from t=0.
    assert "644 (432–855) (0.90) / 740 (500–980) (0.99 (0.98–1.00))" in gateway


def test_a_counters_rate_is_read_between_its_first_and_last_sample_in_the_window() -> None:
    sampler = Sampler(None, {}, ())  # type: ignore[arg-type]
    for at, value in ((0.0, 0.0), (1.0, 100.0), (2.0, 300.0), (3.0, 600.0), (4.0, 1000.0)):
        sampler.rows.append((at, "engine", [Sample(GENERATED, {}, value)]))
    assert sampler.rate("engine", GENERATED, 1.0, 3.0) == 250.0
    assert sampler.rate("engine", GENERATED, 3.5, 9.0) is None


def test_vllm_direct_again_is_paired_with_direct_as_a_relay_is() -> None:
    """Direct once more in every round: its ratio and its TTFT p99 are
    paired with direct's like a relay's, the band two cells of one target
    differ by within a round."""
    results = [
        row("direct", 0, 1000.0, ttft_p99_all=4.0),
        row("again", 0, 950.0, ttft_p99_all=4.25),
        row("makeup", 0, 900.0, ttft_p99_all=4.5),
        row("direct", 1, 500.0, ttft_p99_all=6.0),
        row("again", 1, 520.0, ttft_p99_all=5.9),
        row("makeup", 1, 480.0, ttft_p99_all=6.2),
    ]
    lines = overload_table(results).splitlines()
    again = next(line for line in lines if "direct, again" in line)
    # 0.95 and 1.04 paired; its own rounds around their median would read
    # 1.00 (0.68–1.32).
    assert "0.99 (0.95–1.04)" in again
    # +0.25 and -0.10 s after direct's p99 in the same round.
    assert "+0.08 (-0.10–+0.25)" in again
    gateway = next(line for line in lines if "make up" in line)
    assert "+0.35 (+0.20–+0.50)" in gateway


def test_what_a_relay_adds_to_the_residual_is_paired_with_direct_in_the_same_round() -> None:
    results = [
        row("direct", 0, 1000.0, residual_p50=0.010, residual_p99=0.050),
        row("makeup", 0, 900.0, residual_p50=0.014, residual_p99=0.080),
        row("direct", 1, 1000.0, residual_p50=0.020, residual_p99=0.150),
        row("makeup", 1, 900.0, residual_p50=0.021, residual_p99=0.160),
    ]
    gateway = next(line for line in overload_table(results).splitlines() if "make up" in line)
    # +4 and +1 ms at p50 (their median 2.5), +30 and +10 at p99: per round.
    assert "+3 (+1–+4) / +20 (+10–+30)" in gateway
    direct = next(line for line in overload_table(results).splitlines() if "vLLM direct" in line)
    assert "+" not in direct
