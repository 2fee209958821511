"""A run's summary (``benchmarks.summary``): the stamp its header carries
and reads back, the command a user typed, each round beside the medians.
Pure: results built here, no engine."""

from pathlib import Path
from typing import Any

from benchmarks.summary.kinds import kind_of
from benchmarks.summary.overhead import overload_rounds, rows_rounds
from benchmarks.summary.page import Stamp, page, read_stamp, restamp
from benchmarks.summary.prefix import say_means
from benchmarks.summary.write import shown_command, write_summary

STAMP = Stamp(
    commit="abc1234",
    date="2026-12-06",
    command='make bench-overhead BENCH_ARGS="--layout pinned"',
    machine="2 CPUs",
    layout="pinned",
    raw="git show abc1234:docs/a.json, git show abc1234:docs/b.json",
    note="a note",
)


def overload(target: str, repeat: int, tokens: float, p99: float) -> dict[str, Any]:
    return {
        "target": target,
        "repeat": repeat,
        "client": "immediate",
        "served": 10,
        "rejected_429": 0,
        "tokens_per_s_all": tokens,
        "ttft_p99_all": p99,
        "ttft_p99": p99,
        "preemptions": 0.0,
    }


def test_the_header_reads_back_as_the_stamp_it_was_written_from() -> None:
    text = page("overhead/x", STAMP, [("Tables", "| a |\n|---|\n| 1 |")])
    assert read_stamp(text) == STAMP
    assert "- raw results: `git show abc1234:docs/a.json`, `git show abc1234:docs/b.json`" in text


def test_a_page_without_the_stamps_fields_has_no_stamp() -> None:
    assert read_stamp("# Load report\n\n- commit: `abc1234`\n\n## Steps\n") is None


def test_restamping_replaces_the_header_and_keeps_the_body() -> None:
    first = restamp("# Load report\n\n- **Graceful**: 1-8 users\n", STAMP)
    again = restamp(first, Stamp(**{**STAMP.__dict__, "commit": "def5678"}))
    stamp = read_stamp(again)
    assert stamp is not None
    assert stamp.commit == "def5678"
    assert again.count("- commit:") == 1
    assert again.rstrip().endswith("- **Graceful**: 1-8 users")


def test_the_command_is_the_make_target_a_user_types() -> None:
    argv = ["/x/.venv/bin/python", "-m", "benchmarks.overhead", "--layout", "pinned"]
    assert shown_command(argv) == 'make bench-overhead BENCH_ARGS="--layout pinned"'
    assert shown_command(["python", "-m", "benchmarks.prefix"]) == "make bench-prefix"
    assert (
        shown_command(["python", "-m", "benchmarks.tokenizer_read", "--rounds", "5"])
        == "python -m benchmarks.tokenizer_read --rounds 5"
    )


def test_each_overload_round_is_paired_with_direct_in_the_same_round() -> None:
    results = [
        overload("direct", 0, 1000.0, 4.0),
        overload("direct", 1, 800.0, 5.0),
        overload("makeup", 0, 900.0, 4.5),
        overload("makeup", 1, 880.0, 4.9),
    ]
    lines = overload_rounds(results).splitlines()
    assert "in time / late" not in lines[0]  # no round recorded it
    gateway = [line for line in lines if "`make up`" in line]
    assert "| 1 | 900 | 0.90 |" in gateway[0]
    assert "| 2 | 880 | 1.10 |" in gateway[1]
    assert "+0.50" in gateway[0]
    assert "-0.10" in gateway[1]


def test_each_rows_round_gives_the_relays_cpu_per_thousand_tokens() -> None:
    run = {"row": "32", "repeat": 0, "tokens_per_s": 500.0, "tokens_in_window": 2000.0}
    direct = {**run, "target": "direct", "proxy_cpu_s": None, "engine_api_cpu_s": 1.0}
    router = {**run, "target": "router", "proxy_cpu_s": 0.1, "engine_api_cpu_s": 1.0}
    line = next(x for x in rows_rounds([direct, router]).splitlines() if "vllm-router" in x)
    assert "| 0.050 |" in line  # 0.1 CPU-s over 2,000 tokens


def test_the_prefix_tables_say_which_figures_are_means_of_rounds() -> None:
    old = "| setting | prefix cache hit rate (runs) | TTFT p50 ms | TTFT p99 ms | out tok/s |"
    assert say_means(old) == (
        "| setting | prefix cache hit rate (runs) | TTFT p50 ms, mean of rounds"
        " | TTFT p99 ms, mean of rounds | out tok/s, mean of rounds |"
    )
    assert say_means(say_means(old)) == say_means(old)


def test_a_run_writes_its_stamped_summary_beside_its_results(tmp_path: Path) -> None:
    result = {
        "benchmark": "overhead",
        "gateway_commit": "abc1234 Relay: something +uncommitted changes in app/",
        "machine": {"cpus": 2, "loadavg": "0.1 0.2 0.3", "utc": "2026-12-06T01:02:03Z"},
        "layouts": {"pinned": {"engine_cpus": "0", "overload": [overload("direct", 0, 1.0, 1.0)]}},
    }
    assert kind_of(result) == "overhead"
    path = write_summary(tmp_path, "overhead", result, "Overload, pinned\n\n| a |\n|---|\n")
    stamp = read_stamp(path.read_text())
    assert stamp is not None
    assert (stamp.commit, stamp.date) == ("abc1234", "2026-12-06")
    assert stamp.layout.startswith("pinned: the engine on CPU 0")
    assert "uncommitted changes" in stamp.note
    assert stamp.raw.startswith("not kept")
    assert "## Overload, each round (pinned)" in path.read_text()
