"""The showcase's load shape in rounds: vLLM direct, vLLM direct again and
the gateway, alternated, against a running stack; the rounds' summary.

    .venv/bin/python -m benchmarks.showcase_rounds --rounds 5 [--shape classes]
    make showcase SHOWCASE_ARGS="--rounds 5"   # the same inside the showcase

Each run is ``python -m loadtests.run`` (``make load``) into
``<out>/round-<n>/<target>/``; ``rounds.json`` holds the plan and each
round's order, and ``loadtests/rounds_page.py`` turns the folder into
``summary.md`` and ``<shape>-rounds.png``. No run watches the live page:
a browser beside the gateway's runs alone would weigh on them only. Every
run starts on an idle engine (the one before it may leave requests to
finish). From ``--long-from`` users on the steps hold ``--long-steps``
seconds, so that a TTFT p99 past the knee rests on enough requests.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from app.observe.promtext import parse, total
from deploy.local import ROOT
from loadtests.rounds import rotated
from loadtests.rounds_page import PLAN, write_rounds
from loadtests.schedule import schedule

# What a run is handed: loadtests.run's arguments, and the variables the
# schedule reads.
Runner = Callable[[list[str], dict[str, str]], None]
ENGINE = "http://127.0.0.1:8001"


@dataclass(frozen=True)
class RoundsPlan:
    rounds: int
    shape: str = "degradation"
    # Seconds a step holds from long_from users on (None: as the others).
    long_steps: float | None = 45.0
    long_from: int = 16
    direct_priority: bool = False

    def env(self) -> dict[str, str]:
        if self.long_steps is None:
            return {}
        return {
            "LOAD_LONG_STEP_SECONDS": f"{self.long_steps:g}",
            "LOAD_LONG_FROM": str(self.long_from),
        }

    def argv(self, target: str, out: Path, extra: Sequence[str] = ()) -> list[str]:
        """One run's ``loadtests.run`` arguments; direct again is direct."""
        argv = ["-m", "loadtests.run", "--shape", self.shape]
        argv += ["--target", "gateway" if target == "gateway" else "direct"]
        argv += ["--out", str(out), "--no-live-page", *extra]
        return argv + (["--direct-priority"] if self.direct_priority else [])

    def seconds(self, env: dict[str, str]) -> float:
        """How long one run's shape lasts (its drain not counted)."""
        return max(stage.end for stage in schedule(self.shape, {**env, **self.env()}))


def run_rounds(
    plan: RoundsPlan,
    out: Path,
    run: Runner,
    settle: Callable[[], None] = lambda: None,
    extra: Sequence[str] = (),
) -> Path:
    """Every round's three runs in its rotated order; the summary page."""
    out.mkdir(parents=True, exist_ok=True)
    order = [list(rotated(index)) for index in range(plan.rounds)]
    record = {
        "shape": plan.shape,
        "order": order,
        "direct_priority": plan.direct_priority,
        "long_steps": plan.long_steps,
        "long_from": plan.long_from,
    }
    (out / PLAN).write_text(json.dumps(record, indent=2) + "\n")
    env = {**os.environ, **plan.env()}
    for number, targets in enumerate(order, start=1):
        for target in targets:
            settle()
            print(f"round {number}/{plan.rounds}: {target}", flush=True)
            run(plan.argv(target, out / f"round-{number}" / target, extra), env)
    return write_rounds(out)


def wait_idle(engine: str, timeout: float = 180.0) -> None:
    """Until the engine runs and holds nothing (or ``timeout`` passes: the
    run then starts anyway, and its first step says what it met)."""
    deadline = time.monotonic() + timeout
    with httpx.Client() as client:
        while time.monotonic() < deadline:
            try:
                text = client.get(f"{engine}/metrics", timeout=5).text
            except httpx.HTTPError:
                text = ""
            names = ("vllm:num_requests_running", "vllm:num_requests_waiting")
            samples = parse(text, names)
            if text and all(total(samples, name) == 0 for name in names):
                return
            time.sleep(1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    add_options(parser)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--engine-url", default=ENGINE)
    parser.add_argument("--gateway-url")
    parser.add_argument("--gateway-metrics-url")
    parser.add_argument("--prometheus")
    args = parser.parse_args()
    plan = plan_of(args)
    if plan is None:
        parser.error("--rounds must be at least 1")
    out = args.out or ROOT / "reports" / f"rounds-{time.strftime('%Y%m%d-%H%M%S')}"
    extra = ["--engine-url", args.engine_url]
    for option in ("gateway_url", "gateway_metrics_url", "prometheus"):
        if getattr(args, option):
            extra += [f"--{option.replace('_', '-')}", getattr(args, option)]

    def run(argv: list[str], env: dict[str, str]) -> None:
        subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, check=True)

    print(f"{plan.rounds} rounds of 3 runs, {plan.seconds(dict(os.environ)):.0f} s of shape each")
    page = run_rounds(plan, out, run, lambda: wait_idle(args.engine_url), extra)
    print(page.read_text())
    print(f"rounds: {out}")
    return 0


def add_options(parser: argparse.ArgumentParser) -> None:
    """The rounds' options (the showcase takes them too)."""
    parser.add_argument("--rounds", type=int, default=0, help="rounds (0: one run per target)")
    parser.add_argument("--shape", choices=("degradation", "classes"), default="degradation")
    parser.add_argument(
        "--long-steps",
        type=float,
        help="seconds a step holds from --long-from users on (with --rounds: 45; 0: no longer)",
    )
    parser.add_argument("--long-from", type=int, default=16, help="users (default 16)")
    parser.add_argument(
        "--direct-priority",
        action="store_true",
        help="straight at vLLM, the class users send their class's priority in the body",
    )


def plan_of(args: argparse.Namespace) -> RoundsPlan | None:
    """The rounds the options ask for (None: no rounds)."""
    if args.rounds < 1:
        return None
    long_steps = 45.0 if args.long_steps is None else args.long_steps
    return RoundsPlan(
        rounds=args.rounds,
        shape=args.shape,
        long_steps=long_steps or None,
        long_from=args.long_from,
        direct_priority=args.direct_priority,
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
