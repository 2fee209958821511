"""The overload benchmark's own arithmetic (``benchmarks.overhead``): the
after-the-fact check of refusals and the rounds' table. No engine."""

from benchmarks.harness import Call
from benchmarks.overhead.overload import came_back
from benchmarks.overhead.tables import overload_table


def call(user: int, started: float, status: int) -> Call:
    c = Call(status=status, started=started)
    c.user = user
    return c


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
