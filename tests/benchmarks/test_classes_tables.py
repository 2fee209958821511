"""The classes benchmark's tables and summary from a made-up result
(``benchmarks.classes.tables``, the summary kind ``classes``). No engine."""

import math
from pathlib import Path
from typing import Any

from benchmarks.classes.main import parser
from benchmarks.classes.outcomes import KindFigures
from benchmarks.classes.tables import render
from benchmarks.classes.targets import TARGETS
from benchmarks.summary.page import MAX_BYTES
from benchmarks.summary.write import shown_command, write_summary


def figures(sent: int, met: int, refused: int = 0, p99: float = 0.5) -> dict[str, Any]:
    return KindFigures(
        sent=sent,
        met=met,
        late=sent - met - refused,
        refused=refused,
        evicted=0,
        failed=0,
        cut=0,
        attainment=met / sent,
        admitted_attainment=met / (sent - refused),
        ttft_p50=0.1,
        ttft_p99=p99,
        tokens_per_s=100.0,
        output_tokens=1000 * met,
        goodput_tokens=10 * met,
        goodput_per_s=float(met),
    ).as_dict()


def runs(part: str, labels: list[str], rounds: int = 2, **more: Any) -> list[dict[str, Any]]:
    out = []
    for r in range(rounds):
        for t in TARGETS[part]:
            gateway = not t.name.startswith("direct")
            kinds = {label: figures(10, 8 + r, refused=gateway) for label in labels}
            kinds["total"] = figures(10 * len(labels), 16 + r, p99=math.inf)
            out.append(
                {
                    "target": t.name,
                    "round": r,
                    "kinds": kinds,
                    "preemptions": 3.0,
                    "rejections": {"objective_forecast": 1.0} if gateway else None,
                    "evictions": None,
                    "engine": {"running_mean": 16.4, "running_max": 24.0, "kv_mean": 0.91},
                    "cores": {"gateway": 0.41, "client": 0.22},
                    **more,
                }
            )
    return out


def result(rounds: int = 2) -> dict[str, Any]:
    refusals = {"count": 1, "with_room": 1, "first_s": 3.0, "last_s": 3.0}
    eviction = runs("eviction", ["burst"], rounds)
    for r in eviction:
        r |= {
            "running_at_burst": 16.0,
            "burst_at_s": 2.0,
            "low": dict.fromkeys(
                ("completed", "evicted_event", "evicted_429", "refused", "failed", "cut"), 0
            )
            | {"completed": 16},
            "low_told_once": 16,
            "low_told_other": 0,
        }
    return {
        "benchmark": "classes",
        "gateway_src": "/src",
        "gateway_commit": "abc1234 Bench: something",
        "machine": {"utc": "2026-12-07T00:00:00Z", "cpus": 2},
        "engine_cpus": "0",
        "client_cpus": "1",
        "parts": {
            "mixed": {"window_s": 45.0, "runs": runs("mixed", ["chat", "bulk"], rounds)},
            "objectives": {
                "capacity": {"rps": 10.0, "measured": True, "users": 48, "seconds": 30.0},
                "rate_rps": 20.0,
                "window_s": 190.0,
                "runs": runs("objectives", ["tight", "loose"], rounds, refusals=refusals),
            },
            "tenants": {
                "capacity": {"rps": 10.0, "measured": True, "users": 48, "seconds": 30.0},
                "rate_rps": 20.0,
                "window_s": 190.0,
                "runs": runs("tenants", ["A", "B"], rounds, refusals=refusals),
            },
            "eviction": {"sequences": 16, "burst": 8, "runs": eviction},
        },
    }


def test_every_part_has_its_medians_its_pairing_and_each_round() -> None:
    args = parser().parse_args(["--rounds", "2"])
    text = render(result(), args)
    assert "vLLM direct, priority (anchor)" in text
    assert "vLLM direct, priority, again" in text
    # Attainment 80% and 90% over the two rounds: the median and its range.
    assert "85 (80–90)" in text
    # The total's p99 reached by misses.
    assert "∞" in text
    assert "objective_forecast 2" in text  # summed over the rounds
    assert "2 of 2; 3–3 s" in text  # refused while the engine had room
    assert "32 / 0 / 0 / 0 / 0 / 0" in text  # low clients, summed
    assert "32 of 32" in text
    assert "not exported" in text  # the gateway's evictions series absent
    assert "Tenants: open-loop Poisson arrivals at 20.00 requests/s" in text
    for part in ("Mixed", "Objectives", "Tenants", "Eviction"):
        assert f"{part}, each round" in text


def test_the_summary_is_stamped_with_the_make_target(tmp_path: Path) -> None:
    args = parser().parse_args([])
    page = write_summary(tmp_path, "classes", result(), render(result(), args)).read_text()
    assert "- layout: each engine on CPU 0" in page
    assert "Mixed, each round" in page
    argv = ["python", "-m", "benchmarks.classes", "--rounds", "1"]
    assert shown_command(argv) == 'make bench-classes BENCH_ARGS="--rounds 1"'


def test_a_default_run_has_a_summary_small_enough_to_keep(tmp_path: Path) -> None:
    """Five rounds of every part, each figure as wide as a real run's."""
    big = result(rounds=5)
    for data in big["parts"].values():
        for run in data["runs"]:
            for k in run["kinds"].values():
                k |= {"sent": 12_345, "met": 12_345, "late": 1_234, "refused": 1_234}
                k |= {"tokens_per_s": 12_345.6, "output_tokens": 1_234_567}
    args = parser().parse_args([])
    page = write_summary(tmp_path, "classes", big, render(big, args))
    assert page.stat().st_size < MAX_BYTES
