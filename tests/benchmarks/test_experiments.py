"""The rules the experiments (benchmarks/experiments/) read their data by:
which plateau is which, which steps the 10× run takes, what a page shows as
its command, where it writes and the stamp its page carries. Pure functions;
the experiments themselves run against a stack."""

from pathlib import Path

import pytest

from benchmarks.experiments import output
from benchmarks.experiments.__main__ import parse_args, shown_command
from benchmarks.experiments.burst import Run, median_run
from benchmarks.experiments.degradation import choose_steps
from benchmarks.experiments.output import default_out, stamp_page
from benchmarks.experiments.sweep import verdict
from benchmarks.summary.page import read_stamp


def run(
    tokens_per_s: float = 100.0,
    preemptions: float = 0,
    peak_waiting: float = 0,
    peak_kv_usage: float = 0.5,
) -> Run:
    return Run(
        requests=1,
        concurrency=1,
        seconds=1.0,
        output_tokens=int(tokens_per_s),
        latencies=[1.0],
        failed=0,
        preemptions=preemptions,
        engine_tokens=tokens_per_s,
        queue_time_mean=0.0,
        peak_waiting=peak_waiting,
        peak_kv_usage=peak_kv_usage,
    )


def test_a_plateau_without_preemption_or_queue_is_compute_bound() -> None:
    assert verdict(run(), None, 1.0) == "baseline"
    assert verdict(run(), 1.9, 2.0) == "near-linear"
    assert verdict(run(), 1.05, 2.0) == "flat: compute-bound"
    assert verdict(run(), 1.3, 2.0) == "sub-linear: compute-bound"


def test_a_plateau_with_preemptions_or_a_full_queue_is_out_of_kv() -> None:
    assert verdict(run(preemptions=3), 1.0, 2.0) == "flat: out of KV cache (preempting)"
    full = run(peak_waiting=5, peak_kv_usage=1.0)
    assert verdict(full, 1.0, 2.0) == "flat: out of KV cache (queueing)"
    # Waiting with most of the cache free: a limit on sequences, not on memory.
    seats = run(peak_waiting=5, peak_kv_usage=0.3)
    assert verdict(seats, 1.0, 2.0) == "flat: queueing with KV to spare (a sequence limit)"


def test_the_degradation_steps_double_to_1x_then_reach_10x() -> None:
    assert choose_steps(7, 10) == [1, 2, 4, 7, 14, 28, 70]
    assert choose_steps(8, 10) == [1, 2, 4, 8, 16, 32, 80]
    assert choose_steps(1, 10) == [1, 2, 4, 10]


def test_the_median_run_is_a_real_run() -> None:
    runs = [run(tokens_per_s=t) for t in (300.0, 100.0, 200.0)]
    assert median_run(runs) is runs[2]


def test_pages_show_the_command_without_local_addresses() -> None:
    argv = ["all", "--engine-url", "http://127.0.0.1:18001", "--out=/tmp/x", "--repeats", "5"]
    assert shown_command(argv, "sweep") == "python -m benchmarks.experiments sweep --repeats 5"


def test_a_run_writes_under_reports_not_into_docs() -> None:
    assert parse_args(["sweep"]).out is None  # main() takes default_out()
    assert default_out().parent.name == "reports"


def test_a_page_is_stamped_as_a_runs_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The commit of the tree it ran from, as git would give it (no git here).
    monkeypatch.setattr(output, "source_commit", lambda src: "abc1234 Docs: a subject")
    page = tmp_path / "sweep-24-blocks.md"
    page.write_text("# The n-sweep\n\n| n |\n|---|\n")
    stamp_page(page, "python -m benchmarks.experiments sweep", "2 cores, load average 0.5")
    stamp = read_stamp(page.read_text())
    assert stamp is not None
    assert (stamp.commit, stamp.command) == ("abc1234", "python -m benchmarks.experiments sweep")
    assert stamp.layout.startswith("the running stack's")
    assert page.read_text().rstrip().endswith("| n |\n|---|")
