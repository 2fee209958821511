"""Turning a run directory into a report: step table, phases, plots, summary.

    .venv/bin/python -m loadtests.report reports/<run>     # (re)build a report

A run directory holds ``meta.json`` (shape, target, stages), ``records.jsonl``
(one line per request, from the locust users) and ``samples.jsonl`` (the
engine's and gateway's metrics, once a second). The report adds
``steps.csv``, ``summary.json``, ``summary.md`` and one PNG per metric; where
the users were of more than one class, a section and a PNG per class
(``loadtests/classes.py``).
"""

import csv
import json
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from loadtests.classes import ClassStep, class_steps, describe_classes, plot_classes
from loadtests.phases import Phases, Step, build_steps, detect_phases
from loadtests.schedule import Stage

PLOTS = {
    "throughput.png": ("Output tokens/s (engine)", [("tokens_per_s", "tokens/s")]),
    "ttft.png": ("Time to first token (s)", [("ttft_p50", "p50"), ("ttft_p99", "p99")]),
    "itl.png": ("Inter-token latency per request (s)", [("itl_p50", "p50"), ("itl_p99", "p99")]),
    "engine_queue.png": ("Engine requests", [("running", "running"), ("waiting", "waiting")]),
    "kv_usage.png": ("KV cache usage", [("kv_usage", "mean"), ("kv_usage_max", "max")]),
    "preemptions.png": ("Preemptions per step", [("preemptions", "preemptions")]),
    "gateway.png": (
        "Gateway",
        [("gateway_queue", "queue depth (mean)"), ("refused", "429/503 per step")],
    ),
}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _read(run: Path) -> tuple[dict[str, Any], list[Stage], float, list[dict[str, Any]]]:
    """The run's meta, its stages, when locust started, its requests."""
    meta = json.loads((run / "meta.json").read_text())
    records = read_jsonl(run / "records.jsonl")
    starts = [r["t"] for r in records if r.get("event") == "test_start"]
    requests = [r for r in records if "event" not in r]
    t0 = starts[0] if starts else meta["started"]
    return meta, [Stage(**stage) for stage in meta["stages"]], t0, requests


def load_run(run: Path) -> tuple[dict[str, Any], list[Step]]:
    meta, stages, t0, requests = _read(run)
    return meta, build_steps(stages, t0, requests, read_jsonl(run / "samples.jsonl"))


def load_classes(run: Path) -> list[dict[str, ClassStep]]:
    """The run's steps per class of users."""
    _, stages, t0, requests = _read(run)
    return class_steps(stages, t0, requests)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _users(steps: list[Step], indices: list[int]) -> str:
    if not indices:
        return "none"
    first, last = steps[indices[0]].users, steps[indices[-1]].users
    return f"{first} users" if first == last else f"{first}–{last} users"


def describe(meta: dict[str, Any], steps: list[Step], phases: Phases) -> str:
    lines = [f"# Load report: {meta['shape']} against {meta['target']}", ""]
    lines.append(f"Target `{meta['url']}`, {len(steps)} steps, started {meta['started_iso']}.")
    lines.append(f"Command: `{meta['command']}`")
    lines += ["", "## Phases (from the data)", ""]
    if phases.graceful:
        first, last = steps[phases.graceful[0]], steps[phases.graceful[-1]]
        lines.append(
            f"- **Graceful**: {_users(steps, phases.graceful)} — no preemptions, no persistent"
            f" engine waiting queue. Throughput {first.tokens_per_s:.0f} → {last.tokens_per_s:.0f}"
            f" tokens/s; TTFT p50 {_fmt(first.ttft_p50)} → {_fmt(last.ttft_p50)} s."
        )
    else:
        lines.append("- **Graceful**: none — the first step is already past the knee.")
    if phases.knee is not None:
        knee = steps[phases.knee]
        lines.append(
            f"- **Knee**: {knee.users} users — {knee.preemptions:.0f} preemptions, engine waiting"
            f" queue non-empty in {knee.waiting_share:.0%} of samples, KV usage up to"
            f" {knee.kv_usage_max:.0%}."
        )
    else:
        lines.append(
            "- **Knee**: not reached — the engine never preempted nor kept a waiting queue."
        )
    if phases.preempting:
        total = sum(steps[i].preemptions for i in phases.preempting)
        lines.append(
            f"- **Preemption range**: {_users(steps, phases.preempting)} — {total:.0f} preemptions"
            " in all; the KV cache is exhausted and running requests are recomputed."
        )
    else:
        lines.append("- **Preemption range**: none.")
    if phases.saturation is not None:
        lines.append(
            f"- Throughput reaches its plateau at {steps[phases.saturation].users} users"
            " (within 10% of the best step)."
        )
    if phases.gateway_holding:
        refused = sum(steps[i].refused for i in phases.gateway_holding)
        lines.append(
            f"- **Gateway**: held the excess at {_users(steps, phases.gateway_holding)} —"
            f" a persistent queue or refusals ({refused} requests got 429/503)."
        )
    lines += ["", "## Steps", ""]
    lines.append(
        "| users | requests | refused | tokens/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 |"
        " running | waiting | KV max | preemptions | gateway queue |"
    )
    lines.append("|" + "---|" * 13)
    for step in steps:
        lines.append(
            f"| {step.users} | {step.requests} | {step.refused} | {step.tokens_per_s:.0f} |"
            f" {_fmt(step.ttft_p50)} | {_fmt(step.ttft_p99)} | {_fmt(step.itl_p50, 4)} |"
            f" {_fmt(step.itl_p99, 4)} | {step.running:.1f} | {step.waiting:.1f} |"
            f" {step.kv_usage_max:.0%} | {step.preemptions:.0f} | {step.gateway_queue:.1f} |"
        )
    lines += [
        "",
        "Each step leaves out its first quarter (settling). Throughput, queues, KV usage and"
        " preemptions come from the engine's own metrics; TTFT and ITL are measured by the"
        " clients (ITL: each request's mean gap between tokens, then p50/p99 over requests).",
        "",
    ]
    return "\n".join(lines)


def plot(steps: list[Step], out: Path, title: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    users = [step.users for step in steps]
    written = []
    for name, (label, series) in PLOTS.items():
        figure, axis = plt.subplots(figsize=(6, 3.6))
        for attribute, legend in series:
            values = [getattr(step, attribute) for step in steps]
            axis.plot(
                users, [float("nan") if v is None else v for v in values], marker="o", label=legend
            )
        axis.set_xscale("log", base=2)
        axis.set_xticks(users, [str(u) for u in users])
        axis.set_xlabel("concurrent users")
        axis.set_title(f"{label} — {title}", fontsize=9)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(out / name, dpi=90)
        plt.close(figure)
        written.append(name)
    return written


def write_report(run: Path) -> dict[str, Any]:
    meta, steps = load_run(run)
    classes = load_classes(run)
    phases = detect_phases(steps)
    with (run / "steps.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[f.name for f in fields(Step)])
        writer.writeheader()
        for step in steps:
            writer.writerow(asdict(step))
    summary = {
        "meta": meta,
        "steps": [asdict(s) for s in steps],
        "phases": phases.as_dict(),
        "classes": [{name: c.as_dict() for name, c in step.items()} for step in classes],
    }
    (run / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    page = describe(meta, steps, phases)
    title = f"{meta['shape']} → {meta['target']}"
    # One class (the degradation's chat users) needs no section of its own.
    if len({name for step in classes for name in step}) > 1:
        users = [step.users for step in steps]
        page += "\n" + describe_classes(users, classes)
        plot_classes(users, classes, run, title)
    (run / "summary.md").write_text(page)
    plot(steps, run, title)
    return summary


if __name__ == "__main__":
    for argument in sys.argv[1:]:
        write_report(Path(argument))
        print((Path(argument) / "summary.md").read_text())
