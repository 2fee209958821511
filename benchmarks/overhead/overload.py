"""Overload: many more closed-loop streaming users than the engine runs at
once, against every target: served TTFT, 429s, and where the excess waits —
the engine's ``vllm:num_requests_waiting`` against the gateway's
``gateway_queue_depth``, both sampled every second."""

import argparse
from typing import Any

from benchmarks.harness import Call, Client, closed_loop, num, q, tokens_within
from benchmarks.overhead.rows import PREEMPTIONS, rotated
from benchmarks.overhead.targets import GATEWAYS, NAMES, OverheadBench

ENGINE_SERIES = ("vllm:num_requests_waiting", "vllm:num_requests_running")
GATEWAY_SERIES = ("gateway_queue_depth", "gateway_requests_in_flight")


async def run_overload(bench: OverheadBench, args: argparse.Namespace) -> list[dict[str, Any]]:
    targets = [t for t in args.overload_targets if t in bench.targets]
    results = []
    for repeat in range(args.overload_repeats):
        for target in rotated(targets, repeat):
            r = await overload_once(bench, args, target, repeat)
            results.append(r)
            print(
                f"  {bench.layout}, overload {NAMES[target]:<24} served {r['served']}/{r['sent']}"
                f"  429 {r['rejected_429']}  TTFT p99 {num(r['ttft_p99'], 2)} s"
                f"  engine waiting max {num(r['engine_waiting_max'])}"
                f"  gateway queue max {num(r['gateway_queue_max'])}",
                flush=True,
            )
    return results


async def overload_once(
    bench: OverheadBench, args: argparse.Namespace, target: str, repeat: int
) -> dict[str, Any]:
    url = bench.url(target)
    async with Client(url) as client:
        sampled = {"engine": bench.engine.url}
        # Only the gateway publishes its queue; the router's /metrics are on
        # a port of their own and have no such gauge.
        if target in GATEWAYS:
            sampled["gateway"] = url

        async def one(user: int) -> Call:
            return await client.stream(bench.body(args.overload_max_tokens))

        async with bench.measure(
            client, (PREEMPTIONS,), sampled=sampled, series=ENGINE_SERIES + GATEWAY_SERIES
        ) as window:
            calls = await closed_loop(args.overload_users, args.overload_seconds, one)
    settle = min(5.0, args.overload_seconds / 5)
    start, end = window.started + settle, window.started + args.overload_seconds
    served = [c for c in calls if c.status == 200]
    ttfts = [t for c in served if c.started >= start and (t := c.ttft) is not None]
    waiting = window.series("engine", "vllm:num_requests_waiting", start, end)
    running = window.series("engine", "vllm:num_requests_running", start, end)
    queue = window.series("gateway", "gateway_queue_depth", start, end)

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    return {
        "layout": bench.layout,
        "target": target,
        "repeat": repeat,
        "sent": len(calls),
        "served": len(served),
        "rejected_429": sum(1 for c in calls if c.status == 429),
        "other_errors": sum(1 for c in calls if c.status not in (200, 429)),
        "tokens_per_s": tokens_within(served, start, end) / (end - start),
        "ttft_p50": q(ttfts, 0.5),
        "ttft_p99": q(ttfts, 0.99),
        "engine_waiting_mean": mean(waiting),
        "engine_waiting_max": max(waiting) if waiting else None,
        "engine_running_mean": mean(running),
        "gateway_queue_mean": mean(queue),
        "gateway_queue_max": max(queue) if queue else None,
        "preemptions": window.delta(PREEMPTIONS),
        "others_cores": round(window.others_cores, 3),
    }
