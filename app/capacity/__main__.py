"""``python -m app.capacity``: how many sequences a KV cache holds.

    python -m app.capacity --config config.json --kv-cache-gib 60 --max-model-len 8192
    python -m app.capacity --config config.json --gpu-memory-gib 24 \\
        --gpu-memory-utilization 0.9 --max-model-len 8192

Prints the KV bytes per token, the blocks the cache holds, and the sequences
that fit at once at full context and at a typical length — and what the
arithmetic leaves out.
"""

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from app.capacity.model import ModelShape, UnsupportedModel, read_model_config
from app.capacity.plan import GIB, CapacityPlan, gpu_kv_cache_bytes, plan_capacity
from app.capacity.weights import estimate_parameters, weights_bytes_on_disk

NOT_MODELLED = (
    "sliding-window attention: every layer is counted at full length",
    "multi-head latent attention (DeepSeek-style): refused, not estimated",
    "quantized KV caches (--kv-cache-dtype fp8 and others): 16- and 32-bit only",
    "prefix caching: a prefix shared by several sequences is stored once; here, once each",
    "activations, CUDA graphs and other allocations vLLM's start-up profiling subtracts,"
    " unless given as --overhead-gib",
    "--max-num-seqs, which caps running sequences whatever the memory (vLLM's default: 256"
    " on GPUs, 128 on CPUs)",
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m app.capacity", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--config", type=Path, required=True, help="the model's config.json")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--kv-cache-gib", type=float, help="memory given to the KV cache")
    source.add_argument("--gpu-memory-gib", type=float, help="the GPU's memory (one card)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument(
        "--weights-gib",
        type=float,
        help="the weights' memory (default: the checkpoint's files, else estimated)",
    )
    parser.add_argument("--overhead-gib", type=float, default=0.0)
    parser.add_argument(
        "--max-model-len", type=int, help="default: the config's max_position_embeddings"
    )
    parser.add_argument("--block-size", type=int, default=16, help="tokens per block (CPU: 128)")
    parser.add_argument("--dtype", default="auto", help="auto, bfloat16, float16, float32")
    parser.add_argument(
        "--typical-len", type=int, default=1000, help="a typical prompt + output, in tokens"
    )
    parser.add_argument("--max-num-seqs", type=int, help="the engine's --max-num-seqs, if set")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser.parse_args(argv)


def gib(value: float) -> int:
    return round(value * GIB)


def kv_cache_from_gpu(
    args: argparse.Namespace, shape: ModelShape, bytes_per_element: int
) -> tuple[int, str]:
    """The KV cache's bytes on a GPU, and how they were reached."""
    if args.weights_gib is not None:
        weights, how = gib(args.weights_gib), "given"
    elif (on_disk := weights_bytes_on_disk(args.config)) is not None:
        weights, how = on_disk, "the checkpoint's files"
    elif (params := estimate_parameters(shape)) is not None:
        weights = params * bytes_per_element
        how = f"estimated: {params / 1e9:.2f} B parameters × {bytes_per_element} bytes"
    else:
        raise ValueError(
            "cannot estimate the weights of this model (mixture of experts, quantized, or"
            " incomplete config): pass --weights-gib"
        )
    total = gib(args.gpu_memory_gib)
    cache = gpu_kv_cache_bytes(total, args.gpu_memory_utilization, weights, gib(args.overhead_gib))
    text = (
        f"{args.gpu_memory_gib:.2f} GiB × {args.gpu_memory_utilization:.2f}"
        f" − weights {weights / GIB:.2f} GiB ({how})"
        f" − overhead {args.overhead_gib:.2f} GiB = {cache / GIB:.2f} GiB"
    )
    return cache, text


def describe(plan: CapacityPlan, cache_text: str, typical: int, max_num_seqs: int | None) -> str:
    shape = plan.shape
    full = plan.max_model_len
    per_token = plan.kv_bytes_per_token
    lines = [
        f"model:        {shape.name}: {shape.layers} layers, {shape.attention_heads} attention"
        f" heads, {shape.kv_heads} KV heads ({shape.attention_kind}), head dim {shape.head_dim}",
        f"KV dtype:     {plan.dtype}, {plan.bytes_per_element} bytes per element",
        f"KV per token: {per_token:,} bytes ({per_token / 1024:.1f} KiB) = 2 × {shape.layers}"
        f" layers × {shape.kv_heads} KV heads × {shape.head_dim} head dim"
        f" × {plan.bytes_per_element} bytes",
        f"KV cache:     {cache_text}",
        f"blocks:       {plan.num_blocks:,} of {plan.block_size} tokens"
        f" ({plan.bytes_per_block:,} bytes each) = {plan.kv_tokens:,} tokens;"
        f" {plan.usable_blocks:,} hold tokens (vLLM keeps one aside)",
        f"at full context ({full:,} tokens): {plan.max_sequences(full):,} sequences at once",
        f'  vLLM logs "KV cache size: {plan.engine_reported_tokens():,} tokens, Maximum'
        f' concurrency for {full:,} tokens per request: {plan.max_concurrency(full):.2f}x"',
        f"at a typical length ({typical:,} tokens): {plan.max_sequences(typical):,} sequences"
        " at once",
    ]
    if max_num_seqs is not None and plan.max_sequences(typical) > max_num_seqs:
        lines.append(f"  … but --max-num-seqs {max_num_seqs} runs at most {max_num_seqs}")
    if shape.max_position_embeddings and full > shape.max_position_embeddings:
        lines.append(
            f"warning: --max-model-len {full:,} exceeds the model's"
            f" {shape.max_position_embeddings:,} positions; vLLM refuses it by default"
        )
    lines += [f"warning: {caveat}" for caveat in shape.caveats]
    lines.append("not modelled:")
    lines += [f"  - {item}" for item in NOT_MODELLED]
    return "\n".join(lines) + "\n"


def as_json(plan: CapacityPlan, typical: int) -> str:
    full = plan.max_model_len
    figures = {
        "kv_bytes_per_token": plan.kv_bytes_per_token,
        "dtype": plan.dtype,
        "kv_cache_bytes": plan.kv_cache_bytes,
        "block_size": plan.block_size,
        "num_blocks": plan.num_blocks,
        "kv_tokens": plan.kv_tokens,
        "max_model_len": full,
        "max_sequences_full_context": plan.max_sequences(full),
        "max_concurrency_full_context": plan.max_concurrency(full),
        "engine_reported_tokens": plan.engine_reported_tokens(),
        "typical_len": typical,
        "max_sequences_typical": plan.max_sequences(typical),
        "caveats": list(plan.shape.caveats),
    }
    return json.dumps(figures, indent=2) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        shape = read_model_config(args.config)
        max_len = args.max_model_len or shape.max_position_embeddings
        if max_len is None:
            raise ValueError("the config has no max_position_embeddings: pass --max-model-len")
        probe = plan_capacity(shape, 0, max_len, args.block_size, args.dtype)
        if args.kv_cache_gib is not None:
            cache, text = gib(args.kv_cache_gib), f"{args.kv_cache_gib:.2f} GiB, given"
        else:
            cache, text = kv_cache_from_gpu(args, shape, probe.bytes_per_element)
        plan = plan_capacity(shape, cache, max_len, args.block_size, args.dtype)
    except (OSError, ValueError, UnsupportedModel) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    if args.json:
        sys.stdout.write(as_json(plan, args.typical_len))
    else:
        sys.stdout.write(describe(plan, text, args.typical_len, args.max_num_seqs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
