"""The prefix benchmark's tables."""

import argparse
from typing import Any

from benchmarks.harness import ms, num, sections, table


def setting_line(run: dict[str, Any]) -> str:
    """One run, as the progress lines print it."""
    return (
        f"{run['setting']:<40} hit rate {num(run['hit_rate'], 3)}"
        f"  TTFT p50 {ms(run['ttft_p50'], 0)} ms  {run['tokens_per_s']:.0f} tok/s"
        f"  preempt {run['preemptions']:.0f}"
    )


def mix_table(rows: list[dict[str, Any]], skewed: bool) -> str:
    """Per setting over its rounds: the hit rate pooled over the rounds'
    prefix queries (each round's beside it), TTFT and throughput as the mean
    of the rounds (the headers say so: other benchmarks' tables give medians),
    counts summed."""
    headers = [
        "setting",
        "prefix cache hit rate (runs)",
        "TTFT p50 ms, mean of rounds",
        "TTFT p99 ms, mean of rounds",
        "out tok/s, mean of rounds",
        "preempt",
        "served (refused)",
        "affinity hits",
        "load-cap overrides",
        "KV-event fallbacks",
        "waited for its engine",
    ]
    if skewed:
        headers += ["in flight: max/mean, worst second", "mean of seconds", "seconds over cap"]
    body = []
    for r in rows:
        runs = ", ".join("-" if h is None else f"{h:.0%}" for h in r["hit_rate_runs"])
        line = [
            r["setting"],
            f"{r['hit_rate']:.1%} ({runs})" if r["hit_rate"] is not None else "-",
            ms(r["ttft_p50"], 0),
            ms(r["ttft_p99"], 0),
            num(r["tokens_per_s"]),
            num(r["preemptions"]),
            f"{r['served']} ({r['refused']})",
            num(r["affinity_hits"]),
            num(r["load_cap_overrides"]),
            num(r["kv_fallbacks"]),
            num(r.get("affinity_waits")),
        ]
        if skewed:
            line += [
                num(r["max_over_mean_max"], 2),
                num(r["max_over_mean_mean"], 2),
                f"{r['samples_over_cap']} of {r['in_flight_samples']}",
            ]
        body.append(line)
    return table(headers, body)


def estimate_table(est: dict[str, Any]) -> str:
    headers = [
        "document chars",
        "engine prompt tokens (alone)",
        "fitted estimate",
        "error",
        "default estimate",
        "error",
        "whole blocks: engine / estimate of whole pieces",
    ]
    body = [
        [
            str(r["chars"]),
            str(r["engine_tokens"]),
            str(r["fitted"]),
            f"{r['fitted_error']:+.1%}",
            str(r["default"]),
            f"{r['default_error']:+.1%}",
            f"{r['engine_blocks']} / {r['fitted_blocks']}",
        ]
        for r in est["documents"]
    ]
    return table(headers, body)


def render(result: dict[str, Any], args: argparse.Namespace) -> str:
    head = (
        f"two engines of {args.kv_blocks} KV blocks, {args.users} closed-loop streaming users,"
        f" {args.docs} documents of about {args.doc_chars} characters, prompts as {args.prompts},"
        f" max_tokens {args.max_tokens} (ignore_eos), {args.repeats} round(s) of"
        f" {args.seconds:g} s"
    )
    parts = []
    if result["rag"]:
        parts.append(f"RAG mix: {head}\n\n" + mix_table(result["rag"], skewed=False))
    if result["skewed"]:
        parts.append(
            f"Skewed mix (one document takes {args.hot_share:.0%}): {head}\n\n"
            + mix_table(result["skewed"], skewed=True)
        )
    if "estimate" in result:
        parts.append(
            "Prefix-aware demand's estimate against the engine's count\n\n"
            + estimate_table(result["estimate"])
        )
    return sections(parts)
