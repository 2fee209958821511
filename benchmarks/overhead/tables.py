"""The overhead benchmark's tables: rows, overload and ``vllm bench serve``
per layout, the profiles, and two results side by side (``--compare``)."""

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.harness import ms, num, sections, table
from benchmarks.overhead.first_batch import first_batch_table
from benchmarks.overhead.profile import profile_table
from benchmarks.overhead.spread import spread, spread_text
from benchmarks.overhead.targets import NAMES, TARGETS, layout_note


def rows_table(agg: list[dict[str, Any]]) -> str:
    headers = [
        "users",
        "target",
        "tok/s",
        "ratio to direct",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "p99 per round ms",
        "added p99 ms",
        "residual p50 / p99 ms",
        "residual over direct's p50 / p99 ms",
        "ITL p50 ms",
        "ITL p99 ms",
        "tokens per chunk",
        "relay CPU-s/1k tok",
        "of which kernel",
        "relay CPU-s/1k chunks",
        "vLLM API server CPU-s/1k tok",
        "client CPU-s/1k tok",
        "preempt",
        "errors",
    ]
    body = []
    for a in agg:
        direct = a["target"] == "direct"
        body.append(
            [
                a["row"],
                NAMES[a["target"]],
                spread_text(a["tokens_per_s"], 0),
                "-" if direct else spread_text(a["ratio"]),
                ms(a["ttft_p50"]),
                ms(a["ttft_p99"]),
                spread_text(a["ttft_p99_rounds"], 0, 1000),
                "-" if direct else ms(a["added_ttft_p99"]),
                _pair(a.get("residual_p50"), a.get("residual_p99")),
                "-" if direct else _residual_over(a.get("residual_over_direct")),
                ms(a["itl_p50"], 2),
                ms(a["itl_p99"], 2),
                spread_text(a["tokens_per_event"]),
                "-" if direct else spread_text(a["proxy_cpu_per_1k"], 3),
                "-" if direct else spread_text(a.get("proxy_kernel_cpu_per_1k"), 3),
                "-" if direct else spread_text(a.get("proxy_cpu_per_1k_chunks"), 3),
                spread_text(a["engine_api_cpu_per_1k"], 3),
                spread_text(a["client_cpu_per_1k"], 3),
                num(a["preemptions"]),
                str(a["errors"]),
            ]
        )
    return table(headers, body)


def _pair(p50: float | None, p99: float | None) -> str:
    return "-" if p50 is None or p99 is None else f"{ms(p50, 1)} / {ms(p99, 1)}"


def _residual_over(over: dict[str, float] | None) -> str:
    """What a target's residual (TTFT less the engine's own queue and time
    to first token) adds to direct's."""
    return "-" if over is None else _pair(over["p50"], over["p99"])


def overload_table(results: list[dict[str, Any]]) -> str:
    """Per client and target, over the rounds: throughput from t=0 paired
    with vLLM direct's in the same round (direct's own row: its rounds'
    spread around their median, the noise band), served and refused, the
    refusals' truth (the burst's, Retry-After, admitted when come back),
    TTFT p99 from t=0, the engine's running count."""
    headers = [
        "client",
        "target",
        "tok/s from t=0",
        "× direct (same round)",
        "served / 429 (first 5 s)",
        "Retry-After max s",
        "came back → admitted",
        "served in time / late (× direct's in time)",
        "TTFT p99 s, from t=0 / settled",
        "TTFT p99 from t=0 − direct's (same round) s",
        "residual less the gateway's arrival to admission, p50 / p99 − direct's (same round) ms",
        "engine running mean",
        "engine tok/s, from t=0 / settled (× direct)",
        "preempt",
    ]
    direct = {
        (r["client"], r["repeat"]): r["tokens_per_s_all"]
        for r in results
        if r["target"] == "direct"
    }
    direct_in_time = {
        (r["client"], r["repeat"]): r.get("in_time") for r in results if r["target"] == "direct"
    }
    direct_p99 = {
        (r["client"], r["repeat"]): r["ttft_p99_all"] for r in results if r["target"] == "direct"
    }
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        cells.setdefault((r.get("client", "honour"), r["target"]), []).append(r)
    body = []
    for (client, target), rounds in cells.items():
        if target == "direct":
            values = [r["tokens_per_s_all"] for r in rounds]
            med = spread(values)
            ratios = [v / med["median"] for v in values] if med and med["median"] else []
        else:
            ratios = [
                r["tokens_per_s_all"] / base
                for r in rounds
                if (base := direct.get((client, r["repeat"])))
            ]
        tps = spread([r["tokens_per_s_all"] for r in rounds])
        p99 = spread([r["ttft_p99_all"] for r in rounds if r["ttft_p99_all"] is not None])
        settled = spread([r["ttft_p99"] for r in rounds if r["ttft_p99"] is not None])
        # Paired by round like the throughput: vLLM direct once more in the
        # run (``again``) gives the band two cells of one target differ by.
        added = [
            r["ttft_p99_all"] - base
            for r in rounds
            if r["ttft_p99_all"] is not None
            and (base := direct_p99.get((client, r["repeat"]))) is not None
        ]
        running = spread([r["engine_running_mean"] for r in rounds if r["engine_running_mean"]])
        generated = " / ".join(
            _paired(results, rounds, client, key)
            for key in ("engine_tokens_per_s_all", "engine_tokens_per_s")
        )
        back = sum(r.get("came_back", 0) for r in rounds)
        back_ok = sum(r.get("came_back_admitted", 0) for r in rounds)
        retry = [r["retry_after_max"] for r in rounds if r.get("retry_after_max") is not None]
        timely = [r["in_time"] for r in rounds if r.get("in_time") is not None]
        timely_ratios = [
            r["in_time"] / base
            for r in rounds
            if r.get("in_time") is not None and (base := direct_in_time.get((client, r["repeat"])))
        ]
        in_time = (
            f"{sum(timely)} / {sum(r.get('late', 0) for r in rounds)}"
            f" ({spread_text(spread(timely_ratios), 2)})"
            if timely
            else "-"
        )
        body.append(
            [
                client,
                NAMES[target],
                spread_text(tps, 0),
                spread_text(spread(ratios), 2),
                f"{sum(r['served'] for r in rounds)} / {sum(r['rejected_429'] for r in rounds)}"
                f" ({sum(r.get('rejected_early', 0) for r in rounds)})",
                num(max(retry), 1) if retry else "-",
                f"{back_ok} of {back}" if back else "-",
                in_time,
                f"{spread_text(p99, 2)} / {spread_text(settled, 2)}",
                "-" if target == "direct" else _signed(spread(added)),
                "-" if target == "direct" else _residual_added(results, rounds, client),
                spread_text(running, 1),
                generated,
                num(sum(r["preemptions"] or 0 for r in rounds)),
            ]
        )
    return table(headers, body)


def _signed(s: dict[str, float] | None, digits: int = 2) -> str:
    """A difference over the rounds, its sign written: ``+0.27 (+0.10–+0.41)``."""
    if s is None:
        return "-"
    med, lo, hi = (f"{s[k]:+.{digits}f}" for k in ("median", "min", "max"))
    return med if lo == hi else f"{med} ({lo}–{hi})"


def _residual_added(
    results: list[dict[str, Any]], rounds: list[dict[str, Any]], client: str
) -> str:
    """The residual's p50 and p99 less direct's in the same round, in ms
    (median of the rounds, with their range)."""
    parts = []
    for key in ("residual_p50", "residual_p99"):
        base = {(r["client"], r["repeat"]): r.get(key) for r in results if r["target"] == "direct"}
        added = [
            (v - b) * 1000
            for r in rounds
            if (v := r.get(key)) is not None and (b := base.get((client, r["repeat"]))) is not None
        ]
        parts.append(_signed(spread(added), 0))
    return " / ".join(parts)


def _paired(
    results: list[dict[str, Any]], rounds: list[dict[str, Any]], client: str, key: str
) -> str:
    """A figure over ``rounds`` and its ratio to vLLM direct's in the same round."""
    base = {(r["client"], r["repeat"]): r.get(key) for r in results if r["target"] == "direct"}
    values = [v for r in rounds if (v := r.get(key))]
    ratios = [v / b for r in rounds if (v := r.get(key)) and (b := base.get((client, r["repeat"])))]
    if not values:
        return "-"
    return f"{spread_text(spread(values), 0)} ({spread_text(spread(ratios), 2)})"


def vllm_bench_table(results: list[dict[str, Any]]) -> str:
    """Per target, each seed's figure (seeds in order, `/` between); the
    ratio is to the direct run of the same seed."""
    seeds = sorted({r["seed"] for r in results})
    by = {(r["target"], r["seed"]): r for r in results}

    def per_seed(target: str, key: str, fmt: str, base: bool = False) -> str:
        cells = []
        for seed in seeds:
            r, d = by.get((target, seed), {}), by.get(("direct", seed), {})
            value, direct = r.get(key), d.get(key)
            if base:
                value = value / direct if value is not None and direct else None
            cells.append("-" if value is None else format(value, fmt))
        return " / ".join(cells)

    headers = ["target", "output tok/s", "ratio to direct", "TTFT p50 ms", "TTFT p99 ms"]
    headers += ["ITL p99 ms", "completed", "failed", "errors"]
    body = []
    for target in TARGETS:
        if not any(t == target for t, _ in by):
            continue
        errors = [by[(target, s)].get("error", "") for s in seeds if (target, s) in by]
        body.append(
            [
                NAMES[target],
                per_seed(target, "output_throughput", ",.0f"),
                "-" if target == "direct" else per_seed(target, "output_throughput", ".2f", True),
                per_seed(target, "median_ttft_ms", ".1f"),
                per_seed(target, "p99_ttft_ms", ".1f"),
                per_seed(target, "p99_itl_ms", ".1f"),
                per_seed(target, "completed", "d"),
                per_seed(target, "failed", "d"),
                "; ".join(e for e in errors if e) or "-",
            ]
        )
    return table(headers, body)


def render(result: dict[str, Any], args: argparse.Namespace) -> str:
    parts = []
    source = f"gateway source {result['gateway_src']} ({result['gateway_commit']})"
    if args.before_src:
        source += f"; `before`: {args.before_src} ({args.before_commit})"
    for layout, data in result.get("layouts", {}).items():
        where = f"{layout}: {layout_note(layout)}; {source}"
        if "rows" in data:
            parts.append(
                f"Overhead, {where}. Closed-loop users, max_tokens {args.max_tokens}, ignore_eos,"
                f" {args.repeats} rounds of {args.seconds:g} s (measured after the first"
                f" {min(2.0, args.seconds / 5):g} s); each figure the median of the rounds"
                " (min–max), ratios paired with the direct run of the same round\n\n"
                + rows_table(data["rows"])
            )
        for target, profile in data.get("profile", {}).items():
            parts.append(
                f"py-spy, {layout}, {NAMES[target]}, {args.profile_streams} streams,"
                f" {args.profile_seconds:g} s: {profile['samples']} samples, busy"
                f" {profile['busy_share']:.0%} of wall time\n\n" + profile_table(profile)
            )
        if "overload" in data:
            parts.append(
                f"Overload, {where}. {args.overload_users} closed-loop users, max_tokens"
                f" {args.overload_max_tokens}, {args.overload_seconds:g} s,"
                f" {args.overload_repeats} rounds, engine --max-num-seqs {args.max_num_seqs};"
                f" {'warm' if args.overload_warm else 'a fresh'} gateway per cell; medians"
                " of the rounds (min–max)\n\n" + overload_table(data["overload"])
            )
            parts.append(
                f"The burst's first batch and the engine's cores ({layout}; the engine's"
                f" cores: {data.get('engine_cpus', '-')}): medians of the rounds (min–max)"
                "\n\n" + first_batch_table(data["overload"])
            )
        if "vllm_bench" in data:
            parts.append(
                f"vllm bench serve, {where}. Random dataset {args.vllm_bench_input_len} in /"
                f" {args.vllm_bench_output_len} out (ignore_eos), {args.vllm_bench_prompts}"
                f" prompts at concurrency {args.vllm_bench_concurrency}, seeds"
                f" {' / '.join(map(str, args.vllm_bench_seeds))}\n\n"
                + vllm_bench_table(data["vllm_bench"])
            )
    return sections(parts)


def layouts_of(result: dict[str, Any]) -> dict[str, Any]:
    """A result's layouts; a result from before layouts were measured (its
    rows at the top) is the pinned one, as the launcher pinned it then."""
    return result.get("layouts") or {"pinned": result}


def _ratio(a: dict[str, Any]) -> float | None:
    ratio = a.get("ratio")
    return ratio.get("median") if isinstance(ratio, dict) else ratio


def _cpu(a: dict[str, Any]) -> float | None:
    cpu = a.get("proxy_cpu_per_1k", a.get("gateway_cpu_per_1k"))
    return cpu.get("median") if isinstance(cpu, dict) else cpu


def compare(before_path: str, after_path: str) -> str:
    """Two results (e.g. an older commit and this one) side by side, layout
    by layout."""
    before, after = (json.loads(Path(p).read_text()) for p in (before_path, after_path))
    old_layouts = layouts_of(before)
    headers = ["layout", "users", "target", "ratio before", "ratio after"]
    headers += ["added TTFT p50 ms before", "after", "ITL p50 ms before", "after"]
    headers += ["relay CPU-s/1k before", "after"]
    body = []
    for layout, data in layouts_of(after).items():
        old = old_layouts.get(layout, {})
        index = {(a["row"], a["target"]): a for a in old.get("rows", [])}
        for a in data.get("rows", []):
            if a["target"] == "direct":
                continue
            b = index.get((a["row"], a["target"]), {})
            body.append(
                [
                    layout,
                    a["row"],
                    NAMES[a["target"]],
                    num(_ratio(b), 2),
                    num(_ratio(a), 2),
                    ms(b.get("added_ttft_p50"), 2),
                    ms(a["added_ttft_p50"], 2),
                    ms(b.get("itl_p50"), 2),
                    ms(a["itl_p50"], 2),
                    num(_cpu(b), 3),
                    num(_cpu(a), 3),
                ]
            )
    return (
        f"before: {before.get('gateway_commit')}  after: {after.get('gateway_commit')}\n\n"
        + table(headers, body)
        + "\n"
    )
