"""Experiment 4, two-stage degradation at 10× traffic, with and without admission.

The degradation load shape (``make load SHAPE=degradation``, loadtests/)
does the work: chat users stepped up, each step with the engine's metrics.
This experiment picks the steps — 1× is the most chat users the KV cache
holds at once (the planner's arithmetic on the engine's blocks), and the
steps run past it to 10× — then runs the shape straight at vLLM (no
admission) and through the gateway (admission as the stack runs it), and
sets the two side by side.
"""

import argparse
import math
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.experiments import course
from benchmarks.experiments.engine import EngineInfo, prompt_tokens
from benchmarks.experiments.output import NotApplicable, pyplot, write
from benchmarks.harness import machine_note, machine_state, table
from deploy.local import ROOT
from loadtests.phases import detect_phases
from loadtests.prompts import PromptFactory
from loadtests.report import load_run

TARGETS = ("direct", "gateway")


@dataclass
class Degradation:
    base_users: int
    user_tokens: int
    steps: list[int]
    runs: dict[str, dict[str, Any]]  # target -> {"dir", "steps", "phases"}


def chat_user_tokens(info: EngineInfo, max_tokens: int) -> int:
    """The most tokens one ChatUser request holds: its longest prompt (over a
    sample of the shape's own prompts) plus its output."""
    factory = PromptFactory(seed=0)
    longest = max(prompt_tokens(info.url, info.model, factory.chat()) for _ in range(20))
    return longest + max_tokens


def choose_steps(base: int, multiple: int) -> list[int]:
    """Doubling up to 1×, then 1×, 2×, 4× … and the top multiple."""
    below = [2**i for i in range(int(math.log2(base)) + 1) if 2**i < base]
    above = [base * m for m in (1, 2, 4) if m < multiple]
    return [*below, *above, base * multiple]


def run_shape(args: argparse.Namespace, info: EngineInfo, target: str, steps: list[int]) -> Path:
    reports = ROOT / "reports" / "experiments"
    reports.mkdir(parents=True, exist_ok=True)
    before = set(reports.iterdir())
    env = {
        **os.environ,
        "LOAD_STEPS": ",".join(str(s) for s in steps),
        "LOAD_STEP_SECONDS": str(args.step_seconds),
        "LOAD_MAX_TOKENS": str(args.chat_max_tokens),
        "LOAD_IGNORE_EOS": "1",
    }
    command = [sys.executable, "-m", "loadtests.run", "--shape", "degradation"]
    command += ["--target", target, "--engine-url", info.url, "--gateway-url", args.gateway_url]
    command += ["--prometheus", args.prometheus_url, "--out", str(reports)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(
            f"the load shape failed ({target}):\n{done.stdout[-1500:]}{done.stderr[-1500:]}"
        )
    (run,) = set(reports.iterdir()) - before
    return run


def collect(args: argparse.Namespace, info: EngineInfo) -> Degradation:
    tokens = chat_user_tokens(info, args.chat_max_tokens)
    base = args.base_users or info.sequences_that_fit(tokens)
    if base < 1 or base * args.multiple > args.max_users:
        raise NotApplicable(
            f"this cache holds {base} chat users at once; {args.multiple}× that is beyond"
            f" {args.max_users} users. Run it against `make up`'s default cache (24 blocks)."
        )
    steps = choose_steps(base, args.multiple)
    runs = {}
    for target in TARGETS:
        # The two runs follow each other: other work on the machine can differ
        # between them, so each records its own.
        before = machine_state()
        run = run_shape(args, info, target, steps)
        meta, step_rows = load_run(run)
        runs[target] = {
            "machine": machine_note(before, machine_state()),
            "dir": str(run.relative_to(ROOT)),
            "steps": [asdict(step) for step in step_rows],
            "phases": detect_phases(step_rows).as_dict(),
            "meta": meta,
        }
    return Degradation(base, tokens, steps, runs)


def _cell(run: dict[str, Any], users: int, field: str, digits: int) -> str:
    step = next(s for s in run["steps"] if s["users"] == users)
    value = step[field]
    return "-" if value is None else f"{value:,.{digits}f}"


def page(result: Degradation, info: EngineInfo, footer: str) -> str:
    direct, gateway = result.runs["direct"], result.runs["gateway"]
    columns = (
        ("tokens_per_s", 0),
        ("ttft_p50", 2),
        ("ttft_p99", 2),
        ("preemptions", 0),
        ("waiting", 1),
        ("gateway_queue", 1),
        ("refused", 0),
    )
    rows = []
    for users in result.steps:
        label = f"{users} ({users / result.base_users:.2g}×)"
        cells = [
            f"{_cell(direct, users, f, d)} / {_cell(gateway, users, f, d)}" for f, d in columns
        ]
        rows.append([label, *cells])
    phases = {name: run["phases"] for name, run in result.runs.items()}

    def knee(name: str) -> str:
        index = phases[name]["knee"]
        return (
            "not reached"
            if index is None
            else f"{result.runs[name]['steps'][index]['users']} users"
        )

    lines = [
        "# Two-stage degradation at 10× traffic, with and without admission",
        "",
        f'**The course** ({course.WHY_SERVERS}, In Production): "{course.DEGRADATION}"',
        "",
        f"**Here**: {info.describe()}. The degradation load shape (`make load SHAPE=degradation`,"
        f" `loadtests/`) with chat users, {result.user_tokens} tokens per request at most"
        f" (`ignore_eos`), {result.runs['direct']['meta']['stages'][0]['end']:g} s per step."
        f" **1× = {result.base_users} users**, the most whose requests the KV cache holds at"
        f" once; the last step is {result.steps[-1] // result.base_users}×. Each cell is"
        " *direct to vLLM (no admission) / through the gateway (admission on)*.",
        "",
        table(
            [
                "users",
                "output tok/s",
                "TTFT p50 (s)",
                "TTFT p99 (s)",
                "preemptions",
                "engine waiting",
                "gateway queue",
                "429/503",
            ],
            rows,
        ),
        "",
        f"Knee (first step with preemptions or a persistent engine queue): direct"
        f" {knee('direct')}, gateway {knee('gateway')}. Full reports: `{direct['dir']}`,"
        f" `{gateway['dir']}` (not committed; `reports/` is local).",
        "",
        f"The direct run — {direct['machine']}",
        "",
        f"The gateway run — {gateway['machine']}",
        "",
        "**Why they differ.** The stages are the course's, on a real engine; the users at which"
        " they appear are this tiny cache's (a few thousand tokens, chosen so the knee comes"
        " within the shape), not a GPU's — and with the tiny model a preempted request is cheap"
        " to recompute, so the sharp stage costs latency more than throughput.",
        "",
        footer,
        "",
    ]
    return "\n".join(lines)


def plot(result: Degradation, out: Path) -> None:
    plt = pyplot()
    panels = (
        ("tokens_per_s", "output tokens/s"),
        ("ttft_p99", "TTFT p99 (s)"),
        ("preemptions", "preemptions per step"),
        ("waiting", "engine waiting (mean)"),
    )
    figure, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for axis, (field, title) in zip(axes, panels, strict=True):
        for target, style in zip(TARGETS, ("o-", "s--"), strict=True):
            steps = result.runs[target]["steps"]
            label = "direct (no admission)" if target == "direct" else "gateway"
            values = [float("nan") if s[field] is None else s[field] for s in steps]
            axis.plot([s["users"] for s in steps], values, style, label=label)
        for multiple, colour in ((1, "green"), (10, "red")):
            axis.axvline(result.base_users * multiple, color=colour, alpha=0.4, linestyle=":")
        axis.set_xscale("log", base=2)
        axis.set_xticks(result.steps, [str(u) for u in result.steps])
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("concurrent users (dotted: 1× and 10×)", fontsize=8)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out, dpi=90)
    plt.close(figure)


def render(result: Degradation, info: EngineInfo, footer: str, out: Path) -> Path:
    stem = f"degradation-{info.tag}"
    plot(result, out / f"{stem}.png")
    text = page(result, info, footer) + f"\n![degradation]({stem}.png)\n"
    return write(out, stem, text, {"engine": info.cache, "result": result})
