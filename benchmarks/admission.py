"""Admission control against the real engine: does it keep vLLM on the
graceful side of the preemption knee, and what does it cost?

    make bench            # or: .venv/bin/python -m benchmarks.admission

Starts its own engine (CPU, tiny model, a small KV cache) and gateways in
front of it, then runs:

1. *Burst*: the same burst of concurrent streaming requests with fixed
   lengths (``ignore_eos``), sent (a) to vLLM directly, (b) through the
   gateway with admission off, (c) with admission on.
2. *Natural lengths*: closed-loop chat users whose answers end at varied
   lengths (the tiny model's EOS rate: mean about 100 tokens) far below
   ``max_tokens`` (512), against admission that reserves the full
   ``max_tokens`` (no overcommit) and admission with adaptive overcommit.
   A last run with a 1 s queue deadline produces many 429s; users wait for
   ``Retry-After`` and try again, which measures how often an honoured
   ``Retry-After`` leads to admission ("retry ok": admitted / retries).

Prints one table per part and writes ``result.json``, ``tables.md`` and
every process's log under ``--out`` (default ``reports/admission-<time>``).
"""

import argparse
import asyncio
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.observe.promtext import total
from benchmarks.harness import (
    Bench,
    Call,
    Client,
    Processes,
    Service,
    Window,
    benchmark_parser,
    closed_loop,
    num,
    q,
    run_benchmark,
    sections,
    table,
    wait_ready,
)
from loadtests.prompts import PromptFactory

DIRECT = "direct"
PREEMPTIONS = "vllm:num_preemptions_total"
QUEUE_WAIT_SUM = "gateway_queue_wait_seconds_sum"
QUEUE_WAIT_COUNT = "gateway_queue_wait_seconds_count"
KV_BUDGET = "gateway_kv_tokens_budget"
KV_CAPACITY = "gateway_kv_tokens_capacity"
COUNTERS = (PREEMPTIONS, QUEUE_WAIT_SUM, QUEUE_WAIT_COUNT, KV_BUDGET, KV_CAPACITY)

# Target: (process name, its settings besides the engine's URL).
GATEWAYS: dict[str, tuple[str, dict[str, str]]] = {
    "admission off": ("gateway-off", {"GATEWAY_ADMISSION": "off"}),
    "admission on": ("gateway-on", {}),
    "admission on, 1s deadline": ("gateway-deadline-1s", {"GATEWAY_QUEUE_TIMEOUT": "1"}),
    "full reservation": (
        "gateway-full-reservation",
        {"GATEWAY_OVERCOMMIT_MAX": "1.0", "GATEWAY_QUEUE_TIMEOUT": "5"},
    ),
    "adaptive overcommit": ("gateway-adaptive", {"GATEWAY_QUEUE_TIMEOUT": "5"}),
}
BURSTS = [
    # (label, target, retry refused requests)
    ("(a) vLLM direct", DIRECT, False),
    ("(b) gateway, admission off", "admission off", False),
    ("(c) gateway, admission on", "admission on", False),
    ("(d) admission on, 1s queue deadline", "admission on, 1s deadline", False),
    ("(e) as (d), 429s retried after Retry-After", "admission on, 1s deadline", True),
]
NATURALS = [
    ("vLLM direct", DIRECT),
    ("full reservation", "full reservation"),
    ("adaptive overcommit", "adaptive overcommit"),
    # A tight deadline: many 429s; users come back after Retry-After.
    ("adaptive, 1s deadline", "admission on, 1s deadline"),
]


@dataclass
class RunSummary:
    name: str
    sent: int
    served: int
    rejected: int
    preemptions: float
    output_tokens: int
    seconds: float
    tokens_per_s: float
    ttft_p50: float | None
    ttft_p99: float | None
    queue_wait_mean: float | None
    overcommit: float | None = None
    retries: int = 0
    retries_admitted: int = 0


def summarise(name: str, calls: list[Call], window: Window) -> RunSummary:
    """Throughput over the whole run (all its requests' tokens over its wall
    time); the queue wait from the gateway, when there is one."""
    served = [c for c in calls if c.status == 200]
    tokens = sum(c.completion_tokens for c in served)
    ttfts = [t for c in served if (t := c.ttft) is not None]
    seconds = window.seconds
    summary = RunSummary(
        name=name,
        sent=len(calls),
        served=len(served),
        rejected=sum(1 for c in calls if c.status in (429, 503)),
        preemptions=window.delta(PREEMPTIONS),
        output_tokens=tokens,
        seconds=round(seconds, 2),
        tokens_per_s=round(tokens / seconds) if seconds else 0,
        ttft_p50=q(ttfts, 0.5),
        ttft_p99=q(ttfts, 0.99),
        queue_wait_mean=None,
    )
    waited = window.delta(QUEUE_WAIT_COUNT)
    if waited:
        summary.queue_wait_mean = window.delta(QUEUE_WAIT_SUM) / waited
    return summary


def overcommit(window: Window) -> float | None:
    """The gateway's KV budget over the engine's capacity at the end of a run."""
    after = window.after.get("gateway", [])
    capacity = total(after, KV_CAPACITY)
    return round(total(after, KV_BUDGET) / capacity, 2) if capacity else None


def retried(calls: list[Call]) -> tuple[int, int]:
    """Requests a user sent after a 429 (having waited its ``Retry-After``),
    and how many of them were admitted."""
    retries = admitted = 0
    last: dict[int, int] = {}
    for call in calls:  # each user's calls in the order it sent them
        if last.get(call.user) == 429:
            retries += 1
            admitted += call.status == 200
        last[call.user] = call.status
    return retries, admitted


class AdmissionBench(Bench):
    """One engine with a small KV cache and a gateway per admission setting."""

    def __init__(self, args: argparse.Namespace, procs: Processes) -> None:
        super().__init__(procs)
        self.args = args
        self.gateways: dict[str, Service] = {}

    def start(self, targets: set[str]) -> None:
        """The engine and the gateways ``targets`` names."""
        self.engines = [self.procs.engine("engine", kv_blocks=self.args.kv_blocks)]
        wait_ready(self.engines)
        for target, (name, env) in GATEWAYS.items():
            if target in targets:
                settings = {
                    "GATEWAY_UPSTREAM_URL": self.engine.url,
                    "GATEWAY_LOG_LEVEL": "warning",
                    **env,
                }
                self.gateways[target] = self.procs.gateway(
                    name, settings, Path(self.args.gateway_src)
                )
        wait_ready(self.gateways.values(), timeout=120)

    def url(self, target: str) -> str:
        return self.engine.url if target == DIRECT else self.gateways[target].url

    def gateway(self, target: str) -> dict[str, str]:
        """The gateway a run goes through, as ``measure`` reads it."""
        return {} if target == DIRECT else {"gateway": self.gateways[target].url}

    async def burst(
        self, name: str, target: str, requests: int, max_tokens: int, retry: bool = False
    ) -> RunSummary:
        """All requests at once, fixed lengths. With ``retry``, refused
        clients wait for Retry-After and try again (up to three times)."""
        prompts = PromptFactory(seed=11)
        bodies = [
            {
                "model": self.model,
                "messages": prompts.chat(),
                "max_tokens": max_tokens,
                "ignore_eos": True,
            }
            for _ in range(requests)
        ]
        first_retries: list[bool] = []
        async with Client(self.url(target)) as client:

            async def send(body: dict[str, Any]) -> Call:
                call = await client.stream(body)
                for attempt in range(3 if retry else 0):
                    if call.status != 429:
                        break
                    await asyncio.sleep(call.retry_after or 1.0)
                    call = await client.stream(body)
                    if attempt == 0:
                        first_retries.append(call.status == 200)
                return call

            async with self.measure(client, COUNTERS, self.gateway(target)) as window:
                calls = await asyncio.gather(*(send(body) for body in bodies))
        summary = summarise(name, list(calls), window)
        summary.retries, summary.retries_admitted = len(first_retries), sum(first_retries)
        return summary

    async def natural(self, name: str, target: str) -> RunSummary:
        """Closed-loop users, answers of natural length; 429s honour Retry-After."""
        args = self.args
        prompts = PromptFactory(seed=23)
        async with Client(self.url(target)) as client:

            async def one(user: int) -> Call:
                body = {
                    "model": self.model,
                    "messages": prompts.chat(),
                    "max_tokens": args.natural_max_tokens,
                }
                return await client.stream(body)

            async with self.measure(client, COUNTERS, self.gateway(target)) as window:
                calls = await closed_loop(args.users, args.natural_seconds, one)
        summary = summarise(name, calls, window)
        summary.retries, summary.retries_admitted = retried(calls)
        summary.overcommit = overcommit(window)
        return summary


def plan(args: argparse.Namespace) -> tuple[list[tuple[str, str, bool]], list[tuple[str, str]]]:
    """The burst and natural-length runs ``--parts`` asks for."""
    parts = args.parts.split(",")
    bursts = BURSTS if "burst" in parts else []
    naturals = NATURALS if "natural" in parts and args.natural_seconds > 0 else []
    return bursts, naturals


async def run_all(bench: AdmissionBench, args: argparse.Namespace) -> dict[str, Any]:
    bursts, naturals = plan(args)
    # Warm the engine up (the first requests compile and allocate).
    await bench.burst("warm-up", DIRECT, 4, 16)
    results: dict[str, list[RunSummary]] = {"burst": [], "natural": []}
    for label, target, retry in bursts:
        run = await bench.burst(label, target, args.requests, args.max_tokens, retry)
        results["burst"].append(run)
        print(f"  burst {label}: {run.served}/{run.sent} served", flush=True)
    for label, target in naturals:
        run = await bench.natural(label, target)
        results["natural"].append(run)
        print(f"  natural {label}: {run.served}/{run.sent} served", flush=True)
    return {part: [asdict(r) for r in runs] for part, runs in results.items()}


def summary_table(rows: list[dict[str, Any]]) -> str:
    headers = [
        "run",
        "served/sent",
        "rejected",
        "preempt",
        "out tok/s",
        "TTFT p50",
        "TTFT p99",
        "queue wait",
        "overcommit",
        "retry ok",
    ]
    body = []
    for r in [RunSummary(**row) for row in rows]:
        body.append(
            [
                r.name,
                f"{r.served}/{r.sent}",
                str(r.rejected),
                num(r.preemptions),
                num(r.tokens_per_s),
                num(r.ttft_p50, 3),
                num(r.ttft_p99, 3),
                num(r.queue_wait_mean, 3),
                num(r.overcommit, 2),
                f"{r.retries_admitted}/{r.retries}" if r.retries else "-",
            ]
        )
    return table(headers, body)


def render(result: dict[str, Any], args: argparse.Namespace) -> str:
    parts = []
    if result["burst"]:
        parts.append(
            f"Burst: {args.requests} concurrent streams, max_tokens {args.max_tokens},"
            f" ignore_eos, KV {args.kv_blocks} blocks\n\n" + summary_table(result["burst"])
        )
    if result["natural"]:
        parts.append(
            f"Natural lengths: {args.users} closed-loop chat users for {args.natural_seconds:g}s,"
            f" max_tokens {args.natural_max_tokens}\n\n" + summary_table(result["natural"])
        )
    return sections(parts)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--kv-blocks", type=int, default=24)
    parser.add_argument("--users", type=int, default=48)
    parser.add_argument("--natural-seconds", type=float, default=60.0)
    parser.add_argument(
        "--natural-max-tokens",
        type=int,
        default=512,
        help="max_tokens of the natural-length runs: answers end far below it (mean ~100)",
    )
    parser.add_argument("--parts", default="burst,natural", help="burst, natural or both")
    args = parser.parse_args()

    async def run(procs: Processes, out: Path) -> dict[str, Any]:
        bench = AdmissionBench(args, procs)
        bursts, naturals = plan(args)
        bench.start({target for _, target, _ in bursts} | {target for _, target in naturals})
        return await run_all(bench, args)

    run_benchmark("admission", args, run, lambda result: render(result, args))


if __name__ == "__main__":
    main()
