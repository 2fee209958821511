"""A mixed burst of LoRA adapters over two engines with one adapter slot each.

Two engines (CPU build, tiny model, ``--enable-lora --max-loras 1``, the
adapters ``sql`` and ``poem``: ``make setup`` builds them) and, in the same
rounds: the burst split round-robin straight over the engines (what a plain
load balancer does), the gateway routing by load alone
(``GATEWAY_ROUTING_SCORERS=kv_utilization=1,in_flight=1``: the presets
before the adapter scorer), and the gateway with its defaults (least loaded
and the adapter scorer). A burst: ``--requests`` for each adapter in a
seeded random order, all sent at once, streamed, ``--max-tokens`` each with
``ignore_eos``. Per run: the makespan (first send to last end), TTFT p50 /
p99, and the engines' deferred waiting — requests waiting for a LoRA slot,
``vllm:num_requests_waiting_by_reason{reason="deferred"}`` sampled every
100 ms, in request-seconds — and which adapters each engine ran.

    make bench-adapters BENCH_ARGS="--rounds 3"
"""

import argparse
import asyncio
import random
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    Call,
    Client,
    Processes,
    Sampler,
    Service,
    benchmark_parser,
    engine_idle,
    num,
    q,
    run_benchmark,
    table,
    wait_ready,
)

ROOT = Path(__file__).resolve().parent.parent
ADAPTERS = ("sql", "poem")
DEFERRED = "vllm:num_requests_waiting_by_reason"
LORA_INFO = "vllm:lora_requests_info"
PERIOD = 0.1
TARGETS = {
    "round-robin, direct": None,
    "gateway, by load alone": {"GATEWAY_ROUTING_SCORERS": "kv_utilization=1,in_flight=1"},
    "gateway, defaults": {},
}


def lora_env() -> dict[str, str]:
    modules = " ".join(f"{a}={ROOT / '.models/tiny-adapters' / a}" for a in ADAPTERS)
    return {"ENGINE_LORA_MODULES": modules, "ENGINE_MAX_LORAS": "1"}


async def burst(targets: list[Client], order: list[str], max_tokens: int) -> list[Call]:
    """Every request of ``order`` at once, request i to ``targets[i % n]``."""
    calls = [
        targets[i % len(targets)].stream(
            {
                "model": adapter,
                "prompt": f"Request {i}",
                "max_tokens": max_tokens,
                "ignore_eos": True,
            },
            path="/v1/completions",
        )
        for i, adapter in enumerate(order)
    ]
    return list(await asyncio.gather(*calls))


def adapters_since(samples: list[Any], since: float) -> list[str]:
    """The adapters an engine reported running or waiting after ``since``
    (wall clock): its label sets last current after it."""
    used: set[str] = set()
    for s in samples:
        if s.name == LORA_INFO and s.value > since:
            for label in ("running_lora_adapters", "waiting_lora_adapters"):
                used |= {n for n in s.labels.get(label, "").split(",") if n}
    return sorted(used)


async def run_once(
    name: str,
    engines: list[Service],
    gateways: dict[str, Service],
    args: argparse.Namespace,
    order: list[str],
) -> dict[str, Any]:
    urls = [e.url for e in engines] if gateways.get(name) is None else [gateways[name].url]
    clients = [Client(u) for u in urls]
    probe = Client(engines[0].url)
    async with probe:
        for e in engines:
            await engine_idle(probe, e.url)
        sampler = Sampler(probe, {e.name: e.url for e in engines}, (DEFERRED,), period=PERIOD)
        wall = time.time()
        for c in clients:
            await c.__aenter__()
        try:
            sampler.start()
            calls = await burst(clients, order, args.max_tokens)
            await sampler.stop()
        finally:
            for c in clients:
                await c.__aexit__()
        ran = {
            e.name: adapters_since(await probe.metrics(e.url, (LORA_INFO,)), wall) for e in engines
        }
    deferred = sum(
        sum(sampler.series(e.name, DEFERRED, {"reason": "deferred"})) * PERIOD for e in engines
    )
    ttfts = [c.ttft for c in calls if c.ttft is not None]
    return {
        "target": name,
        "makespan_s": max(c.finished for c in calls) - min(c.started for c in calls),
        "ttft_p50_s": q(ttfts, 0.5),
        "ttft_p99_s": q(ttfts, 0.99),
        "deferred_request_s": deferred,
        "failed": sum(1 for c in calls if c.status != 200),
        "tokens": sum(c.completion_tokens for c in calls),
        "adapters_ran": ran,
    }


async def run(procs: Processes, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    engines = [procs.engine(f"engine-{i}", env=lora_env()) for i in range(2)]
    wait_ready(engines)
    upstreams = ",".join(e.url for e in engines)
    gateways: dict[str, Service] = {}
    for name, settings in TARGETS.items():
        if settings is not None:
            env = {
                "GATEWAY_UPSTREAM_URLS": upstreams,
                "GATEWAY_TOKENIZER_DIR": str(ROOT / ".models/tiny"),
                **settings,
            }
            gateways[name] = procs.gateway(name.replace(", ", "-").replace(" ", "-"), env)
    wait_ready(gateways.values(), timeout=120)
    runs = []
    names = list(TARGETS)
    for r in range(args.rounds):
        order = [a for a in ADAPTERS for _ in range(args.requests)]
        random.Random(args.seed + r).shuffle(order)
        # Each round in another order of the targets.
        for name in names[r % len(names) :] + names[: r % len(names)]:
            runs.append({"round": r, **await run_once(name, engines, gateways, args, order)})
            print(runs[-1])
    return {"runs": runs}


def spread(runs: list[dict[str, Any]], key: str) -> str:
    """The median of ``key`` over ``runs``, and its range."""
    values = [r[key] for r in runs if r[key] is not None]
    if not values:
        return "-"
    return f"{num(q(values, 0.5), 2)} ({num(min(values), 2)}–{num(max(values), 2)})"


def render(result: dict[str, Any]) -> str:
    rows = []
    for name in TARGETS:
        mine = [r for r in result["runs"] if r["target"] == name]
        if not mine:
            continue
        both = sum(1 for r in mine for ran in r["adapters_ran"].values() if len(ran) > 1)
        rows.append(
            [
                name,
                spread(mine, "makespan_s"),
                spread(mine, "ttft_p50_s"),
                spread(mine, "ttft_p99_s"),
                spread(mine, "deferred_request_s"),
                f"{both} of {2 * len(mine)}",
                sum(r["failed"] for r in mine),
            ]
        )
    headers = [
        "target",
        "makespan s",
        "TTFT p50 s",
        "TTFT p99 s",
        "deferred request-s",
        "engines that ran both adapters",
        "failed",
    ]
    rounds = result["args"]["rounds"]
    return f"Medians of {rounds} rounds (min–max).\n\n" + table(headers, rows) + "\n"


def main() -> None:
    parser = benchmark_parser(__doc__ or "")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=24, help="per adapter")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    run_benchmark("adapters", args, lambda procs, out: run(procs, out, args), render)


if __name__ == "__main__":
    main()
