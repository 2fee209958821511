"""The overhead benchmark's command line: each layout in turn (its own
engine, router and gateways), its parts, the tables."""

import argparse
from pathlib import Path
from typing import Any

from benchmarks.harness import Processes, benchmark_parser, run_benchmark
from benchmarks.harness.run import source_commit
from benchmarks.overhead import __doc__ as DOC
from benchmarks.overhead.overload import run_overload
from benchmarks.overhead.profile import run_profile
from benchmarks.overhead.rows import Row, aggregate, measured_run, rows_of, run_rows
from benchmarks.overhead.tables import compare, render
from benchmarks.overhead.targets import (
    DEFAULT_TARGETS,
    GATEWAYS,
    LAYOUTS,
    TARGETS,
    OverheadBench,
    add_variant,
    engine_cpus,
)
from benchmarks.overhead.vllm_bench import run_vllm_bench

PARTS = ("rows", "profile", "overload", "vllm-bench")


async def run_parts(bench: OverheadBench, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"engine_cpus": engine_cpus(bench.layout)}
    # Warm-up: the engine compiles and allocates on its first requests; the
    # gateways fit their prompt estimates.
    for target in bench.targets:
        await measured_run(bench, Row("warm-up", 8, True), target, -1, 3.0, 32)
    parts = args.parts
    if "rows" in parts:
        print(f"rows ({bench.layout}):", flush=True)
        runs = await run_rows(bench, args)
        result["runs"] = [r.summary() for r in runs]
        result["rows"] = aggregate(runs, rows_of(args), bench.targets)
    if "profile" in parts:
        print(f"profile ({bench.layout}):", flush=True)
        result["profile"] = await run_profile(bench, args, out)
    if "overload" in parts:
        print(f"overload ({bench.layout}):", flush=True)
        result["overload"] = await run_overload(bench, args)
    if "vllm-bench" in parts:
        print(f"vllm bench serve ({bench.layout}):", flush=True)
        result["vllm_bench"] = await run_vllm_bench(bench, args, out)
    return result


def csv(kind: type = str) -> Any:
    return lambda text: [kind(x) for x in text.split(",") if x]


def choices(allowed: tuple[str, ...]) -> Any:
    def parse(text: str) -> list[str]:
        values = [x for x in text.split(",") if x]
        unknown = [x for x in values if x not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"{','.join(unknown)}: not one of {allowed}")
        return values

    return parse


def parser() -> argparse.ArgumentParser:
    p = benchmark_parser(DOC or "")
    p.add_argument("--layout", choices=(*LAYOUTS, "both"), default="unpinned")
    p.add_argument("--targets", type=choices(tuple(TARGETS)), default=list(DEFAULT_TARGETS))
    p.add_argument(
        "--before-src",
        help="an older gateway's source tree (a git worktree), run as the target `before`"
        " (admission on) beside the others in every round",
    )
    p.add_argument("--parts", type=choices(PARTS), default=list(PARTS))
    p.add_argument("--gateway-env", action="append", default=[], metavar="K=V")
    p.add_argument("--router-args", default="", help="more vllm-router flags, split on spaces")
    p.add_argument("--streams", type=csv(int), default=[1, 8, 32, 64])
    p.add_argument("--non-stream-users", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--kv-space-gib", type=int, default=2)
    p.add_argument(
        "--kv-blocks", type=int, help="the engine's KV blocks (vLLM's --num-gpu-blocks-override)"
    )
    p.add_argument("--max-num-seqs", type=int, default=128)
    p.add_argument("--profile-targets", type=choices((*GATEWAYS, "bare")), default=["makeup"])
    p.add_argument("--profile-streams", type=int, default=32)
    p.add_argument("--profile-seconds", type=int, default=15)
    p.add_argument("--profile-rate", type=int, default=100)
    p.add_argument("--overload-users", type=int, default=256)
    p.add_argument("--overload-max-tokens", type=int, default=256)
    p.add_argument("--overload-seconds", type=float, default=45.0)
    p.add_argument("--overload-repeats", type=int, default=3)
    p.add_argument(
        "--overload-clients",
        type=choices(("honour", "immediate")),
        default=["honour", "immediate"],
        help="a refused user comes back after Retry-After (honour) or at once (immediate)",
    )
    p.add_argument(
        "--overload-warm",
        action="store_true",
        help="keep each gateway running across cells (default: a fresh gateway per cell,"
        " as a user's first overload meets it)",
    )
    p.add_argument(
        "--overload-targets", type=choices(tuple(TARGETS)), default=list(DEFAULT_TARGETS)
    )
    p.add_argument("--vllm-bench-prompts", type=int, default=320)
    p.add_argument("--vllm-bench-concurrency", type=int, default=32)
    p.add_argument("--vllm-bench-input-len", type=int, default=128)
    p.add_argument("--vllm-bench-output-len", type=int, default=128)
    p.add_argument("--vllm-bench-seeds", type=csv(int), default=[1, 2])
    p.add_argument("--seed", type=int, default=12)
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:GATEWAY_X=V,...",
        help="one more target: make up's gateway with these settings (repeatable)",
    )
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    return p


def main() -> None:
    # The variants become targets before the targets are read.
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--variant", action="append", default=[])
    for spec in early.parse_known_args()[0].variant:
        add_variant(spec)
    args = parser().parse_args()
    if args.compare:
        print(compare(*args.compare))
        return
    args.gateway_src_resolved = str(Path(args.gateway_src).resolve())
    if args.before_src:
        args.targets = [*args.targets, "before"] if "before" not in args.targets else args.targets
        args.before_commit = source_commit(args.before_src)
    elif "before" in args.targets:
        raise SystemExit("the target `before` needs --before-src")
    if "profile" in args.parts and not set(args.profile_targets) <= set(args.targets):
        raise SystemExit("--profile-targets must be among --targets (they profile those gateways)")
    layouts = list(LAYOUTS) if args.layout == "both" else [args.layout]

    async def run(procs: Processes, out: Path) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for layout in layouts:
            bench = OverheadBench(args, procs, layout)
            bench.start()
            try:
                result[layout] = await run_parts(bench, args, out)
            finally:
                bench.stop()
        return {"layouts": result}

    run_benchmark("overhead", args, run, lambda result: render(result, args))
