"""Each round's rows, beside the medians: one line per target, round and
kind of request, as the run measured it, so that a page can quote one
round or count the rounds a target read above the anchor in. Targets go by
their short names here (``benchmarks.classes.targets``), which keeps a
default run's summary small enough to keep."""

from typing import Any

from benchmarks.classes.rounds import Run
from benchmarks.harness import table
from benchmarks.summary.page import fixed

KIND_HEADERS = ["target", "round", "kind", "sent", "met", "late", "refused", "evicted", "failed"]
KIND_HEADERS += ["cut", "met %", "TTFT p50 s", "TTFT p99 s", "tok/s", "output tokens"]
KIND_HEADERS += ["goodput tok/s", "engine running mean / max", "engine waiting mean / max"]
KIND_HEADERS += ["engine KV use % mean / max", "preempt", "refusals (reason)"]
KIND_HEADERS += ["gateway / client / others' cores"]


def seconds(value: float | None) -> str:
    return fixed(value).replace("inf", "∞")


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def reasons(counts: dict[str, float] | None) -> str:
    if counts is None:
        return "-"
    return ", ".join(f"{k} {v:.0f}" for k, v in sorted(counts.items()) if v) or "none"


def mean_max(engine: dict[str, float | None], key: str, digits: int, scale: float = 1) -> str:
    mean, most = (fixed(engine.get(f"{key}_{s}"), digits, scale) for s in ("mean", "max"))
    return f"{mean} / {most}"


def run_cells(r: Run) -> list[str]:
    """What belongs to the whole run (the engine, the gateway): on its
    ``total`` line."""
    engine = r.get("engine") or {}
    return [
        mean_max(engine, "running", 1),
        mean_max(engine, "waiting", 1),
        mean_max(engine, "kv", 0, 100),
        fixed(r.get("preemptions"), 0),
        reasons(r.get("rejections")),
        " / ".join(fixed((r.get("cores") or {}).get(k)) for k in ("gateway", "client"))
        + f" / {fixed(r.get('others_cores'))}",
    ]


def kind_rows(runs: list[Run]) -> str:
    body = []
    for r in sorted(runs, key=lambda r: (r["target"], r["round"])):
        for label, k in r["kinds"].items():
            counts = ("sent", "met", "late", "refused", "evicted", "failed", "cut")
            body.append(
                [
                    r["target"],
                    r["round"] + 1,
                    label,
                    *(f"{k[c]:,}" for c in counts),
                    percent(k["attainment"]),
                    seconds(k["ttft_p50"]),
                    seconds(k["ttft_p99"]),
                    fixed(k["tokens_per_s"], 0),
                    f"{k['output_tokens']:,}",
                    fixed(k["goodput_per_s"], 0),
                    *(run_cells(r) if label == "total" else [""] * 6),
                ]
            )
    return table(KIND_HEADERS, body)


def refusal_rows(runs: list[Run]) -> str:
    headers = ["target", "round", "refused", "with engine room", "first s", "last s"]
    body = [
        [
            r["target"],
            r["round"] + 1,
            r["refusals"]["count"],
            r["refusals"]["with_room"],
            fixed(r["refusals"]["first_s"], 1),
            fixed(r["refusals"]["last_s"], 1),
        ]
        for r in sorted(runs, key=lambda r: (r["target"], r["round"]))
    ]
    return table(headers, body)


def eviction_rows(runs: list[Run]) -> str:
    headers = ["target", "round", "running at the burst", "burst at s", "burst met / sent"]
    headers += ["burst TTFT p50 s", "burst TTFT p99 s", "low clients", "told once / other"]
    headers += ["evictions (gateway)", "refusals (reason)"]
    body = []
    for r in sorted(runs, key=lambda r: (r["target"], r["round"])):
        b = r["kinds"]["burst"]
        body.append(
            [
                r["target"],
                r["round"] + 1,
                fixed(r["running_at_burst"], 0),
                fixed(r["burst_at_s"], 1),
                f"{b['met']} / {b['sent']}",
                seconds(b["ttft_p50"]),
                seconds(b["ttft_p99"]),
                ", ".join(f"{k} {v}" for k, v in r["low"].items() if v) or "none",
                f"{r['low_told_once']} / {r['low_told_other']}",
                reasons(r.get("evictions")),
                reasons(r.get("rejections")),
            ]
        )
    return table(headers, body)


def round_tables(result: dict[str, Any]) -> list[str]:
    out = []
    for part, data in (result.get("parts") or {}).items():
        runs = data.get("runs") or []
        if not runs:
            continue
        if part == "eviction":
            out.append(f"Eviction, each round\n\n{eviction_rows(runs)}")
            continue
        out.append(f"{part.capitalize()}, each round\n\n{kind_rows(runs)}")
        if part == "objectives":
            out.append(f"Objectives, refusals in each round\n\n{refusal_rows(runs)}")
    return out
