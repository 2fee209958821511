"""The prefix benchmark's summary: each round of each setting beside the
tables, whose TTFT and throughput are means of the rounds (the hit rate is
pooled over the rounds' prefix queries)."""

import re
from typing import Any

from benchmarks.summary.page import fixed, table

Record = dict[str, Any]

# The tables' columns that are means of the rounds, and how they say so.
MEAN_COLUMNS = ("TTFT p50 ms", "TTFT p99 ms", "out tok/s")
MEAN_NOTE = ", mean of rounds"


def layout(result: Record) -> str:
    cpus = (result.get("machine") or {}).get("engine_cpus") or "the launcher's default cores"
    return f"two engines on {cpus}; the gateways, the router and the client not pinned"


def say_means(tables: str) -> str:
    """The tables' header lines with their means named (tables written
    before they said so): ``| TTFT p50 ms |`` → ``| TTFT p50 ms, mean of rounds |``."""
    out = []
    for line in tables.splitlines():
        if line.startswith("| setting |"):
            for column in MEAN_COLUMNS:
                line = re.sub(rf"\| {re.escape(column)} \|", f"| {column}{MEAN_NOTE} |", line)
        out.append(line)
    return "\n".join(out)


def per_round(result: Record) -> list[tuple[str, str]]:
    runs = result.get("runs") or []
    sections = []
    for mix in dict.fromkeys(r["mix"] for r in runs):
        mine = [r for r in runs if r["mix"] == mix]
        sections.append((f"Each round ({mix} mix)", rounds_table(mine)))
    return sections


def rounds_table(runs: list[Record]) -> str:
    settings = list(dict.fromkeys(r["setting"] for r in runs))
    body = [
        [
            r["setting"],
            r["repeat"] + 1,
            "-" if r.get("hit_rate") is None else f"{r['hit_rate']:.1%}",
            fixed(r.get("ttft_p50"), 0, 1000),
            fixed(r.get("ttft_p99"), 0, 1000),
            fixed(r.get("tokens_per_s"), 0),
            fixed(r.get("preemptions"), 0),
            f"{r.get('served', '-')} ({r.get('refused', '-')})",
            fixed(r.get("affinity_hits"), 0),
            fixed(r.get("load_cap_overrides"), 0),
            fixed(r.get("max_over_mean_max")),
        ]
        for r in sorted(runs, key=lambda r: (settings.index(r["setting"]), r["repeat"]))
    ]
    headers = ["setting", "round", "prefix cache hit rate", "TTFT p50 ms", "TTFT p99 ms"]
    headers += ["out tok/s", "preempt", "served (refused)", "affinity hits", "load-cap overrides"]
    headers += ["in flight: max/mean, worst second"]
    return table(headers, body)
