"""Experiment 5, capacity as a surface: how many sequences a KV cache holds
at once over prompt length × output length — the planner's worst case
(``app.capacity``: every sequence at its full length, in whole blocks) — for
the running engine and for a real model on a named GPU, with measured points
on the first: the smallest burst at which the engine preempted.

The course draws capacity as a surface over concurrency × prompt length ×
output length; the other experiments sweep one axis. Here, at each measured
(prompt, output), bursts of n requests start together (each prompt distinct
from its first token, so no block is shared through the prefix cache; its
output forced to full length with ``ignore_eos``), n from the planner's answer
up. Past what fits, the engine does one of two things: it admits the burst
and preempts when the sequences grow into blocks that are not there, or —
where the prompts alone fill the cache, or a sequence never needs a block
beyond its first — it admits only what fits and the rest wait. So each point
has two measures: the most the engine ran at once without preempting, and
the first burst that preempted; against the planner's answer.
"""

import argparse
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.capacity import CapacityPlan, plan_capacity, read_model_config
from app.capacity.plan import GIB, gpu_kv_cache_bytes
from app.capacity.weights import estimate_parameters
from benchmarks.experiments.burst import Run, measure, warm_up
from benchmarks.experiments.engine import EngineInfo
from benchmarks.experiments.kv_capacity import engine_plan
from benchmarks.experiments.output import pyplot, write
from benchmarks.harness import table
from deploy.local import ROOT

# The real model and card drawn beside the running engine.
GPU_MODEL = "llama-3-8b"
GPU_NAME = "one 80 GiB GPU (H100 or A100 80GB)"
GPU_GIB = 80
GPU_UTILIZATION = 0.9
GPU_MAX_MODEL_LEN = 8192
GPU_MAX_NUM_SEQS = 256  # vLLM's default on GPUs
GPU_BLOCK_SIZE = 16
# (prompt, output) tokens measured on the running engine: across the surface,
# from one block per sequence to most of the context.
POINTS = ((16, 112), (100, 156), (100, 250), (300, 340), (64, 960), (900, 300))
# Bursts past the planner's answer before a point is called "no onset".
MAX_PAST = 4
GRID = 48


@dataclass
class Point:
    prompt: int
    output: int
    planned: int
    bursts: list[tuple[int, Run]] = field(default_factory=list)

    @property
    def onset(self) -> int | None:
        """The smallest burst that preempted."""
        return next((n for n, run in self.bursts if run.preemptions > 0), None)

    @property
    def held(self) -> int:
        """The most the engine ran at once in a burst without preemption."""
        return max(
            (round(run.peak_running) for _, run in self.bursts if run.preemptions == 0), default=0
        )


@dataclass
class Surface:
    engine_plan: CapacityPlan
    engine_max_num_seqs: int | None
    gpu_plan: CapacityPlan
    gpu_cache_text: str
    points: list[Point]


def gpu_plan() -> tuple[CapacityPlan, str]:
    shape = read_model_config(ROOT / "tests" / "data" / "model_configs" / f"{GPU_MODEL}.json")
    probe = plan_capacity(shape, 0, GPU_MAX_MODEL_LEN, GPU_BLOCK_SIZE, "bfloat16")
    params = estimate_parameters(shape) or 0
    weights = params * probe.bytes_per_element
    cache = gpu_kv_cache_bytes(GPU_GIB * GIB, GPU_UTILIZATION, weights)
    text = (
        f"{GPU_GIB} GiB × {GPU_UTILIZATION} − weights {weights / GIB:.1f} GiB"
        f" ({params / 1e9:.2f} B parameters, bfloat16) = {cache / GIB:.1f} GiB of KV cache"
    )
    return plan_capacity(shape, cache, GPU_MAX_MODEL_LEN, GPU_BLOCK_SIZE, "bfloat16"), text


def distinct_prompts(count: int, length: int, vocab: int, salt: int) -> list[list[int]]:
    """Token-id prompts that differ from their first token on (no shared block)."""
    return [
        [10 + (salt * 7919 + i * 104729 + j * 31) % (vocab - 20) for j in range(length)]
        for i in range(count)
    ]


def measure_point(info: EngineInfo, plan: CapacityPlan, prompt: int, output: int) -> Point:
    vocab = int(json.loads((ROOT / info.root / "config.json").read_text())["vocab_size"])
    point = Point(prompt, output, plan.max_sequences(prompt + output))
    for n in range(max(1, point.planned), point.planned + MAX_PAST + 1):
        prompts = distinct_prompts(n, prompt, vocab, salt=prompt * 10_000 + output * 10 + n)
        run = measure(info.url, info.model, prompts, output, n)
        point.bursts.append((n, run))
        # Preempted, or ran fewer than it was sent (the rest waited): past
        # what fits, either way.
        if run.preemptions > 0 or (n > point.planned and run.peak_running < n):
            break
    return point


def collect(args: argparse.Namespace, info: EngineInfo) -> Surface:
    config = Path(args.model_config) if args.model_config else ROOT / info.root / "config.json"
    plan, _ = engine_plan(args, info, config)
    gpu, text = gpu_plan()
    warm_up(info.url, info.model)
    points = [
        measure_point(info, plan, prompt, output)
        for prompt, output in POINTS
        if prompt + output <= info.max_model_len
    ]
    return Surface(plan, args.max_num_seqs, gpu, text, points)


def concurrency(plan: CapacityPlan, tokens: int, cap: int | None) -> int:
    fit = plan.max_sequences(tokens)
    return fit if cap is None else min(cap, fit)


def draw(axis: Any, plan: CapacityPlan, cap: int | None, title: str) -> Any:
    import numpy as np

    top = plan.max_model_len
    lengths = np.unique(np.geomspace(8, top, GRID).astype(int))
    prompts, outputs = np.meshgrid(lengths, lengths)
    fits = np.vectorize(lambda p, o: concurrency(plan, int(p + o), cap) if p + o <= top else 0)(
        prompts, outputs
    ).astype(float)
    fits[fits == 0] = np.nan
    highest = np.nanmax(fits)
    levels = [2**k for k in range(0, int(math.log2(highest)) + 2)]
    from matplotlib.colors import LogNorm

    mesh = axis.pcolormesh(
        prompts, outputs, fits, norm=LogNorm(1, highest), cmap="viridis", shading="auto"
    )
    lines = axis.contour(prompts, outputs, fits, levels=levels, colors="white", linewidths=0.6)
    axis.clabel(lines, fmt="%d", fontsize=7)
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("prompt tokens")
    axis.set_ylabel("output tokens")
    axis.set_title(title, fontsize=9)
    return mesh


def plot(result: Surface, info: EngineInfo, out: Path) -> None:
    plt = pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2))
    plan = result.engine_plan
    mesh = draw(
        left,
        plan,
        result.engine_max_num_seqs,
        f"tiny model, this engine: {plan.num_blocks} blocks of {plan.block_size} tokens"
        "\nsequences that fit at once (planner); dots: what the engine did",
    )
    figure.colorbar(mesh, ax=left, label="sequences at once")
    for point in result.points:
        onset = point.onset
        said = f"ran {point.held}, " + (f"preempted at {onset}" if onset else "queued the rest")
        left.scatter(point.prompt, point.output, s=40, color="red", edgecolors="white", zorder=3)
        left.annotate(
            f"{said}\n(planner: {point.planned})",
            (point.prompt, point.output),
            textcoords="offset points",
            xytext=(-6, 5) if point.prompt > 200 else (6, 5),
            ha="right" if point.prompt > 200 else "left",
            fontsize=7,
            color="white",
        )
    gpu = result.gpu_plan
    mesh = draw(
        right,
        gpu,
        GPU_MAX_NUM_SEQS,
        f"{GPU_MODEL} on {GPU_NAME}, bfloat16: {gpu.num_blocks:,} blocks of {gpu.block_size}"
        f"\ncapped at --max-num-seqs {GPU_MAX_NUM_SEQS} (the plateau)",
    )
    figure.colorbar(mesh, ax=right, label="sequences at once")
    figure.tight_layout()
    figure.savefig(out, dpi=90)
    plt.close(figure)


def page(result: Surface, info: EngineInfo, footer: str, image: str) -> str:
    plan = result.engine_plan
    rows = []
    for point in result.points:
        onset = point.onset
        bursts = ", ".join(
            f"{n}: ran {run.peak_running:.0f}, {run.preemptions:.0f} preempted"
            for n, run in point.bursts
        )
        rows.append(
            [
                point.prompt,
                point.output,
                plan.blocks_per_sequence(point.prompt + point.output),
                point.planned,
                point.held,
                f"{point.held - point.planned:+d}",
                "none (the rest waited)" if onset is None else onset,
                bursts,
            ]
        )
    return "\n".join(
        [
            "# Capacity as a surface",
            "",
            "How many sequences fit at once over prompt length × output length: the planner's"
            " worst case (`python -m app.capacity`: each sequence at its full length, in whole"
            f" blocks, in {plan.usable_blocks} usable blocks), against what the engine ran at"
            " once and where it preempted. Left, the running engine"
            f" ({info.describe()}); right, {GPU_MODEL} on {GPU_NAME}:"
            f" {result.gpu_cache_text}, blocks of {GPU_BLOCK_SIZE}, up to {GPU_MAX_MODEL_LEN:,}"
            " tokens — arithmetic, not a measurement.",
            "",
            f"![capacity surface]({image})",
            "",
            "## Measured on the engine",
            "",
            "Each burst sends n requests at once, each a distinct prompt of that many tokens"
            " (token ids) and that many output tokens (`ignore_eos`); n from the planner's answer"
            f" up, at most {MAX_PAST} past it, stopping at the first that preempted or that the"
            " engine did not run whole (the rest waited for room). *Ran at once*: the most"
            " sequences the engine ran together (`vllm:num_requests_running`, sampled every"
            " 0.2 s) in a burst without preemption; the distance is that against the planner.",
            "",
            table(
                [
                    "prompt",
                    "output",
                    "blocks each",
                    "planner: fit at once",
                    "ran at once",
                    "distance",
                    "first burst that preempted",
                    "each burst (n sent: what it did)",
                ],
                rows,
            ),
            "",
            footer,
            "",
        ]
    )


def render(result: Surface, info: EngineInfo, footer: str, out: Path) -> Path:
    stem = f"surface-{info.tag}"
    plot(result, info, out / f"{stem}.png")
    text = page(result, info, footer, f"{stem}.png")
    return write(out, stem, text, {"engine": info.cache, "result": result})
