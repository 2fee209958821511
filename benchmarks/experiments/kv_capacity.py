"""Experiment 3, the capacity formula: the planner (``app.capacity``) against
what the engine reports for itself, and against where preemptions start.

Three checks:

1. KV bytes per token from real models' configs, beside the course's figures;
2. the planner's blocks and "Maximum concurrency" for the engine's own model
   and cache, beside ``vllm:cache_config_info`` — a real check only when the
   engine was sized in bytes (with a block override the block count is given,
   and only the per-sequence arithmetic is checked);
3. n around the planner's prediction of how many of the course's sequences
   fit: no preemption up to it, preemptions past it.
"""

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

from app.capacity import CapacityPlan, UnsupportedModel, plan_capacity, read_model_config
from benchmarks.experiments import course
from benchmarks.experiments.burst import Run, course_prompts, measure, warm_up
from benchmarks.experiments.engine import EngineInfo, prompt_tokens
from benchmarks.experiments.output import pyplot, write
from benchmarks.harness import table
from deploy.local import ROOT

CONFIGS = ROOT / "tests" / "data" / "model_configs"
# The course's example: "roughly 14 GB left for cache", 1,000-token requests.
COURSE_CACHE_BYTES = 14 * 10**9
COURSE_REQUEST_TOKENS = 1000


@dataclass
class ModelRow:
    name: str
    bytes_per_token: int | None
    detail: str
    course_example: int | None = None


@dataclass
class Capacity:
    models: list[ModelRow]
    config: str
    plan: CapacityPlan
    sized_in_bytes: bool
    sequence_tokens: int
    predicted: int
    onset: list[tuple[int, Run]] = field(default_factory=list)
    sweep_onset: int | None = None


def model_rows(folder: Path) -> list[ModelRow]:
    rows = []
    for path in sorted(folder.glob("*.json")):
        try:
            shape = read_model_config(path)
        except UnsupportedModel as exc:
            rows.append(ModelRow(path.stem, None, str(exc).split(": ", 1)[1][:90] + "…"))
            continue
        plan = plan_capacity(shape, COURSE_CACHE_BYTES, COURSE_REQUEST_TOKENS, dtype="bfloat16")
        detail = (
            f"2 × {shape.layers} × {shape.kv_heads} × {shape.head_dim} × 2 ({shape.attention_kind})"
        )
        rows.append(
            ModelRow(
                path.stem,
                plan.kv_bytes_per_token,
                detail,
                plan.max_sequences(COURSE_REQUEST_TOKENS),
            )
        )
    return rows


def engine_plan(
    args: argparse.Namespace, info: EngineInfo, config: Path
) -> tuple[CapacityPlan, bool]:
    shape = read_model_config(config)
    if info.block_override is None and info.kv_cache_bytes is not None:
        cache = info.kv_cache_bytes
        return plan_capacity(shape, cache, info.max_model_len, info.block_size, args.dtype), True
    # Sized in blocks: give the planner the bytes those blocks take, so only
    # the per-sequence part of the arithmetic is under test.
    probe = plan_capacity(shape, 0, info.max_model_len, info.block_size, args.dtype)
    cache = info.num_blocks * probe.bytes_per_block
    return plan_capacity(shape, cache, info.max_model_len, info.block_size, args.dtype), False


def sweep_onset(out: Path, info: EngineInfo) -> int | None:
    """Where preemptions started in the n-sweep against the same cache, if it ran."""
    path = out / f"sweep-{info.tag}.json"
    if not path.exists():
        return None
    steps = json.loads(path.read_text())["result"]["steps"]
    return next((s["n"] for s in steps if s["run"]["preemptions"] > 0), None)


def collect(args: argparse.Namespace, info: EngineInfo) -> Capacity:
    config = Path(args.model_config) if args.model_config else ROOT / info.root / "config.json"
    plan, in_bytes = engine_plan(args, info, config)
    prompts = course_prompts(64)
    longest = max(prompt_tokens(info.url, info.model, p) for p in prompts)
    tokens = longest + args.max_tokens
    predicted = plan.max_sequences(tokens)
    shown = config.relative_to(ROOT) if config.is_relative_to(ROOT) else config
    result = Capacity(model_rows(CONFIGS), str(shown), plan, in_bytes, tokens, predicted)
    if predicted + 2 <= args.onset_limit:
        warm_up(info.url, info.model)
        for n in range(max(1, predicted - 1), predicted + 3):
            batch = course_prompts(n)
            result.onset.append((n, measure(info.url, info.model, batch, args.max_tokens, n)))
    result.sweep_onset = sweep_onset(args.out, info)
    return result


def _formula_section(result: Capacity) -> list[str]:
    rows = []
    for row in result.models:
        claim = ""
        if row.name.startswith("qwen2.5-0.5b"):
            claim = f"{course.QWEN_KB_PER_TOKEN} KB"
        elif row.name in ("llama-2-7b", "llama-3-8b", "mistral-7b-v0.1"):
            claim = f'~{course.SEVEN_B_KB_PER_TOKEN} KB ("a 7B model")'
        size = (
            "refused"
            if row.bytes_per_token is None
            else f"{row.bytes_per_token:,} B = {row.bytes_per_token / 1024:g} KiB"
        )
        example = "-" if row.course_example is None else f"{row.course_example:,}"
        rows.append([f"`{row.name}`", row.detail, size, claim or "-", example])
    return [
        "## 1. KV bytes per token from real configs",
        "",
        f"The course ({course.KV_CHAPTER}): `{course.FORMULA}`, with KV bytes per token ="
        f" `{course.PER_TOKEN}`; its example: {course.T4_EXAMPLE}.",
        "",
        "Computed by the planner from the configs in `tests/data/model_configs/` (16-bit KV);"
        " the last column is the planner's answer to the course's example"
        f" ({COURSE_CACHE_BYTES / 1e9:g} GB of cache, {COURSE_REQUEST_TOKENS:,}-token"
        " requests, blocks of 16) — arithmetic, not a measurement:",
        "",
        table(
            [
                "model",
                "2 × layers × KV heads × head dim × bytes",
                "KV per token",
                "the course says",
                "sequences in the course's example",
            ],
            rows,
        ),
        "",
    ]


def _engine_section(result: Capacity, info: EngineInfo) -> list[str]:
    plan, full = result.plan, info.max_model_len
    how = (
        f"sized in bytes ({plan.kv_cache_bytes / 1024**3:g} GiB): the planner derives the blocks"
        " itself, so the block count is a real check"
        if result.sized_in_bytes
        else f"sized in blocks (`--num-gpu-blocks-override {info.block_override}`): the block"
        " count is given, not derived — only the per-sequence arithmetic is checked. Start the"
        " stack with `make up ENGINE_KV_BLOCKS=` for the bytes check"
    )
    rows = [
        ["KV bytes per token", f"{plan.kv_bytes_per_token:,} ({plan.dtype})", "-"],
        ["blocks", f"{plan.num_blocks:,}", f"{info.num_blocks:,} (`num_gpu_blocks`)"],
        [
            "KV cache size (tokens)",
            f"{plan.engine_reported_tokens():,}",
            f"{int(info.cache['kv_cache_size_tokens']):,} (`kv_cache_size_tokens`)",
        ],
        [
            f"max concurrency at {full:,} tokens",
            f"{plan.max_concurrency(full):.2f}",
            f"{info.reported_concurrency:.2f} (`kv_cache_max_concurrency`, the start-up log's"
            ' "Maximum concurrency")',
        ],
    ]
    return [
        "## 2. The planner against the engine's own report",
        "",
        f"{info.describe()}; `{result.config}`. The engine was {how}.",
        "",
        table(["quantity", "planner", "vLLM reports"], rows),
        "",
    ]


def _onset_section(result: Capacity) -> list[str]:
    lines = [
        "## 3. Where preemptions start",
        "",
        f"A course prompt plus its output is at most {result.sequence_tokens} tokens, so the"
        f" planner says **{result.predicted}** such sequences fit at once: whole blocks of"
        f" {result.plan.block_size} tokens each, in {result.plan.usable_blocks:,} blocks"
        " (vLLM's block pool keeps one of its blocks aside as a placeholder).",
        "",
    ]
    if result.onset:
        rows = [
            [
                n,
                f"{run.preemptions:.0f}",
                f"{run.peak_running:.0f}",
                f"{run.peak_waiting:.0f}",
                f"{run.peak_kv_usage:.0%}",
                "yes" if n <= result.predicted else "no",
            ]
            for n, run in result.onset
        ]
        lines += [
            table(
                [
                    "n at once",
                    "preemptions",
                    "peak running",
                    "peak waiting",
                    "peak KV",
                    "fits by the planner",
                ],
                rows,
            ),
            "",
        ]
    else:
        lines += ["Too many to reach with a burst here: no onset measured.", ""]
    if result.sweep_onset is not None:
        lines += [
            "In the n-sweep against this cache, preemptions first appear at"
            f" n={result.sweep_onset}.",
            "",
        ]
    return lines


def page(result: Capacity, info: EngineInfo, footer: str) -> str:
    lines = ["# The capacity formula against the engine", ""]
    lines += _formula_section(result) + _engine_section(result, info) + _onset_section(result)
    lines += [
        "**Why they differ.** Nowhere for the bytes: the formula is the engine's own arithmetic"
        " and the tiny model has plain grouped-query attention; on a GPU the cache is what"
        " `--gpu-memory-utilization` leaves after the weights and vLLM's profiled activations,"
        " which the planner takes as `--overhead-gib`, so real GPU figures come out a little"
        " lower than its default.",
        "",
        footer,
        "",
    ]
    return "\n".join(lines)


def plot(result: Capacity, out: Path) -> None:
    plt = pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8))
    sized = [row for row in result.models if row.bytes_per_token]
    left.barh([row.name for row in sized], [(row.bytes_per_token or 0) / 1024 for row in sized])
    left.set_xlabel("KV KiB per token (16-bit)")
    left.set_title("the formula, from real configs", fontsize=9)
    if result.onset:
        ns = [n for n, _ in result.onset]
        right.bar([str(n) for n in ns], [run.preemptions for _, run in result.onset])
        edge = ns.index(result.predicted) + 0.5 if result.predicted in ns else 0
        right.axvline(edge, color="red", linestyle="--", label=f"planner: {result.predicted} fit")
        right.legend(fontsize=8)
    right.set_xlabel("n at once")
    right.set_ylabel("preemptions")
    right.set_title("preemptions around the planner's prediction", fontsize=9)
    for axis in (left, right):
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(out, dpi=90)
    plt.close(figure)


def render(result: Capacity, info: EngineInfo, footer: str, out: Path) -> Path:
    stem = f"capacity-{info.tag}"
    plot(result, out / f"{stem}.png")
    text = page(result, info, footer) + f"\n![capacity]({stem}.png)\n"
    return write(out, stem, text, {"engine": info.cache, "result": result})
