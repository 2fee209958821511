"""The classes benchmark's command line: its options, the parts in turn
(each with the engines it needs), the tables."""

import argparse
from pathlib import Path
from typing import Any

from benchmarks.classes import __doc__ as DOC
from benchmarks.classes.eviction import run_eviction
from benchmarks.classes.mixed import run_mixed
from benchmarks.classes.objectives import run_objectives
from benchmarks.classes.stack import ClassesStack
from benchmarks.classes.tables import render
from benchmarks.classes.targets import PARTS
from benchmarks.classes.tenants import run_tenants
from benchmarks.harness import Processes, benchmark_parser, run_benchmark

RUNNERS = {
    "mixed": run_mixed,
    "objectives": run_objectives,
    "tenants": run_tenants,
    "eviction": run_eviction,
}


def parts(text: str) -> list[str]:
    chosen = [x for x in text.split(",") if x]
    unknown = [x for x in chosen if x not in PARTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"{','.join(unknown)}: not one of {PARTS}")
    return chosen


def parser() -> argparse.ArgumentParser:
    p = benchmark_parser(DOC or "")
    p.add_argument("--parts", type=parts, default=list(PARTS), help=",".join(PARTS))
    p.add_argument("--rounds", type=int, default=5, help="every target once per round")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--gateway-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a GATEWAY_* setting for every gateway of the run (repeatable)",
    )
    engine = p.add_argument_group("make up's engine (mixed, objectives, tenants)")
    engine.add_argument("--kv-blocks", type=int, default=24)
    engine.add_argument("--max-num-seqs", type=int, default=128)
    mixed = p.add_argument_group("mixed")
    mixed.add_argument("--mixed-seconds", type=float, default=180.0)
    mixed.add_argument("--bulk-users", type=int, default=32)
    mixed.add_argument("--bulk-words", type=int, default=150)
    mixed.add_argument("--bulk-max-tokens", type=int, default=200)
    mixed.add_argument("--bulk-objective", type=float, default=30.0, help="seconds")
    mixed.add_argument("--chat-users", type=int, default=4)
    mixed.add_argument("--chat-max-tokens", type=int, default=24)
    mixed.add_argument("--chat-think", type=float, default=0.3, help="seconds")
    mixed.add_argument("--chat-objective", type=float, default=1.0, help="seconds")
    obj = p.add_argument_group("objectives (the capacity and request size: tenants too)")
    obj.add_argument("--objectives-seconds", type=float, default=180.0)
    obj.add_argument("--objectives-load", type=float, default=2.0, help="× capacity")
    obj.add_argument(
        "--capacity-rps", type=float, default=0.0, help="the engine's capacity (0: measure it)"
    )
    obj.add_argument("--capacity-users", type=int, default=48)
    obj.add_argument("--capacity-seconds", type=float, default=30.0)
    obj.add_argument("--objectives-max-tokens", type=int, default=64)
    obj.add_argument("--tight-share", type=float, default=0.2)
    obj.add_argument("--tight-objective", type=float, default=1.0, help="seconds")
    obj.add_argument("--loose-objective", type=float, default=10.0, help="seconds")
    ten = p.add_argument_group("tenants")
    ten.add_argument("--tenants-seconds", type=float, default=180.0)
    ten.add_argument(
        "--tenants-load", type=float, default=2.0, help="× capacity (the objectives part's)"
    )
    ten.add_argument("--tenant-a-times", type=float, default=10.0, help="A's arrivals ÷ B's")
    ten.add_argument("--tenant-objective", type=float, default=10.0, help="seconds")
    ev = p.add_argument_group("eviction")
    ev.add_argument("--eviction-seqs", type=int, default=16, help="the engine's max-num-seqs")
    ev.add_argument(
        "--eviction-kv-blocks", type=int, default=None, help="unset: the engine's 1 GiB of KV"
    )
    ev.add_argument("--low-max-tokens", type=int, default=1500)
    ev.add_argument("--burst-size", type=int, default=0, help="0: half the engine's sequences")
    ev.add_argument("--burst-max-tokens", type=int, default=32)
    ev.add_argument("--burst-objective", type=float, default=1.0, help="seconds")
    ev.add_argument(
        "--eviction-timeout", type=float, default=120.0, help="seconds before a run is cut"
    )
    return p


def main() -> None:
    args = parser().parse_args()

    async def run(procs: Processes, out: Path) -> dict[str, Any]:
        stack = ClassesStack(args, procs)
        stack.pin()
        result: dict[str, Any] = {
            "engine_cpus": stack.engine_cpus,
            "client_cpus": stack.client_cpus,
            "parts": {},
        }
        try:
            for part in PARTS:
                if part in args.parts:
                    print(f"{part}:", flush=True)
                    result["parts"][part] = await RUNNERS[part](stack, args)
        finally:
            stack.stop()
        return result

    run_benchmark("classes", args, run, lambda result: render(result, args))
