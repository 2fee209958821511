"""``python -m benchmarks.experiments {batching,sweep,capacity,degradation,all}``."""

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.experiments import batching, degradation, kv_capacity, surface, sweep
from benchmarks.experiments.engine import EngineInfo, engine_info
from benchmarks.experiments.output import NotApplicable, default_out, stamp, stamp_page
from benchmarks.harness import Client, engine_idle, machine_note, machine_state
from deploy.local import ROOT

Collect = Callable[[argparse.Namespace, EngineInfo], Any]
Render = Callable[[Any, EngineInfo, str, Path], Path]
EXPERIMENTS: dict[str, tuple[Collect, Render]] = {
    "batching": (batching.collect, batching.render),
    "sweep": (sweep.collect, sweep.render),
    # After the sweep: the capacity page quotes the sweep's preemption onset.
    "capacity": (kv_capacity.collect, kv_capacity.render),
    "degradation": (degradation.collect, degradation.render),
    "surface": (surface.collect, surface.render),
}
# Options that only say where things are; left out of the command a page shows.
LOCAL_OPTIONS = ("--engine-url", "--gateway-url", "--prometheus-url", "--out")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.experiments",
        description="The course's experiments against the running stack (`make up`).",
    )
    parser.add_argument("experiment", choices=[*EXPERIMENTS, "all"])
    env = os.environ
    parser.add_argument("--engine-url", default=env.get("ENGINE_URL", "http://127.0.0.1:8001"))
    parser.add_argument(
        "--gateway-url", default=env.get("EXPERIMENTS_GATEWAY_URL", "http://127.0.0.1:8000")
    )
    parser.add_argument(
        "--prometheus-url", default=env.get("PROMETHEUS_URL", "http://127.0.0.1:9090")
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="where the pages, data and plots go (default reports/experiments-<time>)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement (median)")
    parser.add_argument("--max-tokens", type=int, default=128, help="output tokens per request")
    parser.add_argument("--prompts", type=int, default=32, help="batching: prompts per run")
    parser.add_argument("--naive-python", default=".venv-engine/bin/python")
    parser.add_argument("--naive-dtype", default="bfloat16")
    parser.add_argument("--no-naive", action="store_true", help="batching: skip the naive loop")
    parser.add_argument("--ns", default="1,2,4,8,16,32", help="sweep: the n to step through")
    parser.add_argument("--model-config", help="capacity: the engine's config.json")
    parser.add_argument("--dtype", default="auto", help="capacity: the engine's dtype")
    parser.add_argument("--onset-limit", type=int, default=64)
    parser.add_argument(
        "--max-num-seqs", type=int, help="surface: the engine's --max-num-seqs (default: no cap)"
    )
    parser.add_argument("--chat-max-tokens", type=int, default=256)
    parser.add_argument("--step-seconds", type=float, default=20)
    parser.add_argument("--multiple", type=int, default=10, help="degradation: the top step")
    parser.add_argument("--base-users", type=int, help="degradation: 1× (default: what fits)")
    parser.add_argument("--max-users", type=int, default=200)
    return parser.parse_args(argv)


def shown_command(argv: Sequence[str], name: str) -> str:
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in LOCAL_OPTIONS:
            skip = True
        elif not arg.startswith(LOCAL_OPTIONS):
            kept.append(name if arg == "all" else arg)
    return " ".join(["python -m benchmarks.experiments", *kept])


def wait_idle(url: str) -> None:
    """Start each experiment on an idle engine (an earlier one may still drain)."""

    async def idle() -> None:
        async with Client(url) as client:
            await engine_idle(client, url)

    asyncio.run(idle())


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(raw)
    names = list(EXPERIMENTS) if args.experiment == "all" else [args.experiment]
    args.out = args.out or default_out()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        info = engine_info(args.engine_url)
        wait_idle(info.url)
        collect, render = EXPERIMENTS[name]
        before = machine_state()
        started = time.monotonic()
        try:
            result = collect(args, info)
        except NotApplicable as reason:
            print(f"{name}: skipped — {reason}", flush=True)
            continue
        after = machine_state()
        footer = (
            f"Measured {stamp()} in {time.monotonic() - started:.0f} s. Command:"
            f" `{shown_command(raw, name)}` against `make up` (see the engine line above)."
            f" {machine_note(before, after)}"
        )
        page = render(result, info, footer, args.out)
        machine = machine_note(before, after).removeprefix("Machine at the start: ").rstrip(".")
        stamp_page(page, shown_command(raw, name), machine)
        path = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
        print(f"{name}: {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
