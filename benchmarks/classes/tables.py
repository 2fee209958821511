"""The benchmark's tables: per part, each target's figures as the median of
the rounds with their range (min–max), ratios and differences paired with
the anchor of the same round; then each round's rows
(``benchmarks.classes.each_round``)."""

import argparse
from collections.abc import Callable
from typing import Any

from benchmarks.classes.each_round import round_tables
from benchmarks.classes.eviction import LOW_OUTCOMES
from benchmarks.classes.rounds import Figure, Run, across, kind, paired, summed
from benchmarks.classes.targets import ANCHORS, NAMES, TARGETS
from benchmarks.harness import sections, table
from benchmarks.overhead.spread import spread_text


def rounds(args: argparse.Namespace) -> str:
    return f"{args.rounds} round{'s' if args.rounds != 1 else ''}"


def text(s: dict[str, float] | None, digits: int = 2, scale: float = 1.0) -> str:
    """A median (min–max); +inf (a percentile reached by misses) as ∞."""
    return spread_text(s, digits, scale).replace("inf", "∞")


def signed(s: dict[str, float] | None, digits: int = 0, scale: float = 100.0) -> str:
    """A difference from the anchor, its sign written (points, by default)."""
    if s is None:
        return "-"
    med, lo, hi = (f"{s[k] * scale:+.{digits}f}" for k in ("median", "min", "max"))
    return med if lo == hi else f"{med} ({lo}–{hi})"


def reasons(runs: list[Run], target: str, key: str = "rejections") -> str:
    """A gateway's counts by label summed over the rounds (``-``: it has
    none to give, as vLLM direct; ``not exported``: the series is absent)."""
    mine = [r.get(key) for r in runs if r["target"] == target]
    if all(m is None for m in mine):
        return "-" if target.startswith("direct") else "not exported"
    added: dict[str, float] = {}
    for m in mine:
        for name, value in (m or {}).items():
            added[name] = added.get(name, 0.0) + value
    return ", ".join(f"{k} {v:.0f}" for k, v in sorted(added.items()) if v) or "none"


def per_kind(part: str, runs: list[Run], labels: list[str], admitted: bool = False) -> str:
    headers = ["target", "kind", "sent", "met %"]
    headers += ["met % of admitted"] if admitted else []
    headers += ["TTFT p50 s", "TTFT p99 s", "tok/s", "refused", "evicted"]
    body = []
    for t in TARGETS[part]:
        for label in labels:

            def f(key: str, name: str = t.name, label: str = label) -> dict[str, float] | None:
                return across(runs, name, kind(label, key))

            cells: list[object] = [NAMES[t.name], label, text(f("sent"), 0)]
            cells.append(text(f("attainment"), 0, 100))
            if admitted:
                cells.append(text(f("admitted_attainment"), 0, 100))
            cells += [text(f("ttft_p50")), text(f("ttft_p99")), text(f("tokens_per_s"), 0)]
            cells += [text(f("refused"), 0), text(f("evicted"), 0)]
            body.append(cells)
    return table(headers, body)


# A totals column: its header, and its cell from (runs, target, anchor).
Cell = Callable[[list[Run], str, str], str]
Column = tuple[str, Cell]


def median_of(header: str, figure: Figure, digits: int = 0, scale: float = 1.0) -> Column:
    return header, lambda runs, t, a: text(across(runs, t, figure), digits, scale)


def with_ratio(header: str, figure: Figure, digits: int = 0) -> list[Column]:
    """A figure, and its ratio to the anchor's in the same round."""
    return [
        median_of(header, figure, digits),
        (
            f"{header} × anchor",
            lambda runs, t, a: "-" if t == a else text(paired(runs, t, a, figure)),
        ),
    ]


def points(label: str) -> Column:
    """A kind's attainment minus the anchor's in the same round (points)."""
    figure = kind(label, "attainment")
    return (
        f"{label} met − anchor's (points)",
        lambda runs, t, a: "-" if t == a else signed(paired(runs, t, a, figure, ratio=False)),
    )


def engine(key: str) -> Figure:
    """A figure of the engine's sampled load in a run."""
    return lambda r: (r.get("engine") or {}).get(key)


# Where the work waited and what the engine held, and the gateway's
# refusals, in every totals table.
ENGINE_AND_GATEWAY: list[Column] = [
    median_of("engine running, mean", engine("running_mean"), 1),
    median_of("engine waiting, mean", engine("waiting_mean"), 1),
    median_of("engine KV use %, mean", engine("kv_mean"), 0, 100),
    median_of("preempt", lambda r: r["preemptions"]),
    ("refusals by reason, summed", lambda runs, t, a: reasons(runs, t)),
    median_of("gateway cores", lambda r: (r.get("cores") or {}).get("gateway"), 2),
    median_of("client cores", lambda r: (r.get("cores") or {}).get("client"), 2),
    # Other work on the machine meanwhile (other engines, test runs).
    median_of("others' cores", lambda r: r.get("others_cores"), 2),
]


def totals(part: str, runs: list[Run], columns: list[Column]) -> str:
    anchor = ANCHORS[part]
    headers = ["target", *(header for header, _ in columns)]
    body = [[NAMES[t.name], *(c(runs, t.name, anchor) for _, c in columns)] for t in TARGETS[part]]
    return table(headers, body)


def mixed(data: dict[str, Any], args: argparse.Namespace) -> str:
    runs = data["runs"]
    title = (
        f"Mixed: {args.bulk_users} bulk users (low, {args.bulk_words}-word documents, max_tokens"
        f" {args.bulk_max_tokens}, objective {args.bulk_objective:g} s) and {args.chat_users} chat"
        f" users (high, max_tokens {args.chat_max_tokens}, {args.chat_think:g} s think,"
        f" objective {args.chat_objective:g} s), closed loop for {args.mixed_seconds:g} s, window"
        f" {data['window_s']:g} s; engine {args.kv_blocks} KV blocks, max-num-seqs"
        f" {args.max_num_seqs}; {rounds(args)}, medians (min–max)"
    )
    columns = [
        *with_ratio("output tokens", kind("total", "output_tokens")),
        *with_ratio("goodput tok/s", kind("total", "goodput_per_s")),
        *with_ratio("bulk tok/s", kind("bulk", "tokens_per_s")),
        points("chat"),
        points("bulk"),
        *ENGINE_AND_GATEWAY,
    ]
    return (
        f"{title}\n\n{per_kind('mixed', runs, ['chat', 'bulk'])}\n\n"
        f"Mixed, totals paired with the anchor in each round\n\n{totals('mixed', runs, columns)}"
    )


def with_room(runs: list[Run], t: str, a: str) -> str:
    """Refusals while the engine had room, of all refusals, over the rounds;
    and the span of their times (seconds after each run's start)."""
    mine = [r["refusals"] for r in runs if r["target"] == t]
    count = sum(m["count"] for m in mine)
    room = sum(m["with_room"] for m in mine)
    first = [m["first_s"] for m in mine if m["first_s"] is not None]
    last = [m["last_s"] for m in mine if m["last_s"] is not None]
    when = f"; {min(first):.0f}–{max(last):.0f} s" if first else ""
    return f"{room} of {count}{when}"


def objectives(data: dict[str, Any], args: argparse.Namespace) -> str:
    runs = data["runs"]
    cap = data["capacity"]
    measured = (
        f"measured {cap['rps']:.2f} requests/s ({cap['users']} closed-loop users, vLLM direct,"
        f" {cap['seconds']:g} s)"
        if cap.get("measured")
        else f"given {cap['rps']:.2f} requests/s"
    )
    title = (
        f"Objectives: open-loop Poisson arrivals at {data['rate_rps']:.2f} requests/s"
        f" ({args.objectives_load:g}× capacity, {measured}) for {args.objectives_seconds:g} s,"
        f" max_tokens {args.objectives_max_tokens}; {args.tight_share:.0%} tight"
        f" ({args.tight_objective:g} s, high), the rest loose ({args.loose_objective:g} s, normal),"
        f" each in x-slo-ttft-ms; window {data['window_s']:g} s; {rounds(args)},"
        " medians (min–max)"
    )

    columns = [
        *with_ratio("goodput tok/s", kind("total", "goodput_per_s")),
        points("tight"),
        points("loose"),
        median_of("met % of admitted", kind("total", "admitted_attainment"), 0, 100),
        ("refused with engine room (all rounds); first–last s", with_room),
        *ENGINE_AND_GATEWAY,
    ]
    return (
        f"{title}\n\n{per_kind('objectives', runs, ['tight', 'loose'], admitted=True)}\n\n"
        "Objectives, totals paired with the anchor in each round (engine room: fewer sequences"
        " running than it may run and KV cache under 90%, sampled each second)\n\n"
        f"{totals('objectives', runs, columns)}"
    )


def tenants(data: dict[str, Any], args: argparse.Namespace) -> str:
    runs = data["runs"]
    title = (
        f"Tenants: open-loop Poisson arrivals at {data['rate_rps']:.2f} requests/s"
        f" ({args.tenants_load:g}× capacity) for {args.tenants_seconds:g} s, tenant A sending"
        f" {args.tenant_a_times:g}× tenant B's, one class (normal), max_tokens"
        f" {args.objectives_max_tokens}, objective {args.tenant_objective:g} s each"
        " (x-slo-ttft-ms),"
        f" window {data['window_s']:g} s; {rounds(args)}, medians (min–max)"
    )
    columns = [
        *with_ratio("output tokens", kind("total", "output_tokens")),
        points("A"),
        points("B"),
        ("refused with engine room (all rounds); first–last s", with_room),
        *ENGINE_AND_GATEWAY,
    ]
    return (
        f"{title}\n\n{per_kind('tenants', runs, ['A', 'B'])}\n\n"
        "Tenants, totals paired with the anchor in each round\n\n"
        f"{totals('tenants', runs, columns)}"
    )


def eviction(data: dict[str, Any], args: argparse.Namespace) -> str:
    runs = data["runs"]
    title = (
        f"Eviction: an engine of {data['sequences']} sequences (KV blocks:"
        f" {args.eviction_kv_blocks or 'the 1 GiB default'}), each running a low request"
        f" (max_tokens {args.low_max_tokens}), then a burst of {data['burst']} high requests"
        f" (max_tokens {args.burst_max_tokens}, x-slo-ttft-ms {args.burst_objective * 1000:.0f});"
        f" {rounds(args)}, medians (min–max), counts summed over the rounds"
    )
    headers = ["target", "running at the burst", "burst met %", "burst TTFT p50 s"]
    headers += ["burst TTFT p99 s", f"low clients: {' / '.join(LOW_OUTCOMES)}"]
    headers += ["low clients told exactly one outcome", "evictions (gateway)", "refusals by reason"]
    body = []
    for t in TARGETS["eviction"]:
        name = t.name
        low = [sum(r["low"][k] for r in runs if r["target"] == name) for k in LOW_OUTCOMES]
        once = summed(runs, name, lambda r: r["low_told_once"])
        other = summed(runs, name, lambda r: r["low_told_other"])
        body.append(
            [
                NAMES[name],
                text(across(runs, name, lambda r: r["running_at_burst"]), 0),
                text(across(runs, name, kind("burst", "attainment")), 0, 100),
                text(across(runs, name, kind("burst", "ttft_p50"))),
                text(across(runs, name, kind("burst", "ttft_p99"))),
                " / ".join(map(str, low)),
                f"{once:.0f} of {once + other:.0f}",
                reasons(runs, name, "evictions"),
                reasons(runs, name),
            ]
        )
    return f"{title}\n\n{table(headers, body)}"


RENDER = {"mixed": mixed, "objectives": objectives, "tenants": tenants, "eviction": eviction}


def render(result: dict[str, Any], args: argparse.Namespace) -> str:
    parts = []
    source = f"gateway source {result['gateway_src']} ({result['gateway_commit']})"
    for part, data in (result.get("parts") or {}).items():
        parts.append(f"{RENDER[part](data, args)}\n\n{source}")
    parts += round_tables(result)
    return sections(parts)
