"""Admission control against the real engine: does it keep vLLM on the
graceful side of the preemption knee, and what does it cost?

    make bench            # or: .venv/bin/python -m benchmarks.admission

Starts its own engine (CPU, tiny model, a small KV cache) and three gateways
in front of it, then runs:

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

Prints one table per part and writes everything to ``--json``.
"""

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.client import Result, stream_chat
from deploy.local import ManagedProcess, free_port, scrape, value
from loadtests.phases import quantile
from loadtests.prompts import PromptFactory

MODEL = "tiny"


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


class Bench:
    def __init__(self, kv_blocks: int, logs: Path) -> None:
        self.logs = logs
        port = free_port()
        self.engine = ManagedProcess(
            "engine",
            ["deploy/engine/run-cpu.sh"],
            {"ENGINE_PORT": str(port), "ENGINE_KV_BLOCKS": str(kv_blocks)},
            logs,
        )
        self.engine_url = f"http://127.0.0.1:{port}"
        self.gateways: dict[str, str] = {}
        self._procs = [self.engine]

    def start(self) -> None:
        self.engine.wait_http(f"{self.engine_url}/health", timeout=900)
        configs = {
            "admission off": {"GATEWAY_ADMISSION": "off"},
            "admission on": {},
            "admission on, 1s deadline": {"GATEWAY_QUEUE_TIMEOUT": "1"},
            "full reservation": {"GATEWAY_OVERCOMMIT_MAX": "1.0", "GATEWAY_QUEUE_TIMEOUT": "5"},
            "adaptive overcommit": {"GATEWAY_QUEUE_TIMEOUT": "5"},
        }
        for name, env in configs.items():
            port = free_port()
            proc = ManagedProcess(
                f"gateway-{port}",
                [sys.executable, "-m", "app"],
                {
                    "GATEWAY_PORT": str(port),
                    "GATEWAY_UPSTREAM_URL": self.engine_url,
                    "GATEWAY_LOG_LEVEL": "warning",
                    **env,
                },
                self.logs,
            )
            self._procs.append(proc)
            url = f"http://127.0.0.1:{port}"
            proc.wait_http(f"{url}/health/ready", timeout=60)
            self.gateways[name] = url

    def stop(self) -> None:
        for proc in reversed(self._procs):
            proc.stop()

    def engine_metric(self, name: str) -> float:
        return value(scrape(self.engine_url), name)

    async def wait_idle(self) -> None:
        for _ in range(600):
            if (
                self.engine_metric("vllm:num_requests_running") == 0
                and self.engine_metric("vllm:num_requests_waiting") == 0
            ):
                return
            await asyncio.sleep(0.1)


def _queue_wait_mean(url: str | None, before: tuple[float, float]) -> float | None:
    if url is None:
        return None
    samples = scrape(url)
    total = value(samples, "gateway_queue_wait_seconds_sum") - before[0]
    count = value(samples, "gateway_queue_wait_seconds_count") - before[1]
    return total / count if count else None


def _queue_wait_totals(url: str | None) -> tuple[float, float]:
    if url is None:
        return (0.0, 0.0)
    samples = scrape(url)
    return (
        value(samples, "gateway_queue_wait_seconds_sum"),
        value(samples, "gateway_queue_wait_seconds_count"),
    )


def _summarise(
    name: str, results: list[Result], seconds: float, preemptions: float, queue_wait: float | None
) -> RunSummary:
    served = [r for r in results if r.status == 200]
    tokens = sum(r.completion_tokens for r in served)
    ttfts = [r.ttft for r in served if r.ttft is not None]
    return RunSummary(
        name=name,
        sent=len(results),
        served=len(served),
        rejected=sum(1 for r in results if r.status in (429, 503)),
        preemptions=preemptions,
        output_tokens=tokens,
        seconds=round(seconds, 2),
        tokens_per_s=round(tokens / seconds) if seconds else 0,
        ttft_p50=quantile(ttfts, 0.5),
        ttft_p99=quantile(ttfts, 0.99),
        queue_wait_mean=queue_wait,
    )


async def burst(
    bench: Bench,
    name: str,
    url: str,
    gateway: str | None,
    args: argparse.Namespace,
    retry: bool = False,
) -> RunSummary:
    """All requests at once, fixed lengths. With ``retry``, refused clients
    wait for Retry-After and try again (up to three times)."""
    await bench.wait_idle()
    prompts = PromptFactory(seed=11)
    bodies = [
        {
            "model": MODEL,
            "messages": prompts.chat(),
            "max_tokens": args.max_tokens,
            "ignore_eos": True,
        }
        for _ in range(args.requests)
    ]
    preempted = bench.engine_metric("vllm:num_preemptions_total")
    waits = _queue_wait_totals(gateway)
    first_retries: list[bool] = []

    async def client(http: httpx.AsyncClient, body: dict[str, Any]) -> Result:
        result = await stream_chat(http, body)
        for attempt in range(3 if retry else 0):
            if result.status != 429:
                break
            await asyncio.sleep(result.retry_after or 1.0)
            result = await stream_chat(http, body)
            if attempt == 0:
                first_retries.append(result.status == 200)
        return result

    async with httpx.AsyncClient(
        base_url=url, timeout=600, limits=httpx.Limits(max_connections=None)
    ) as http:
        started = time.perf_counter()
        results = await asyncio.gather(*(client(http, body) for body in bodies))
        seconds = time.perf_counter() - started
    await bench.wait_idle()
    preemptions = bench.engine_metric("vllm:num_preemptions_total") - preempted
    summary = _summarise(
        name, list(results), seconds, preemptions, _queue_wait_mean(gateway, waits)
    )
    summary.retries, summary.retries_admitted = len(first_retries), sum(first_retries)
    return summary


async def natural(
    bench: Bench, name: str, url: str, gateway: str | None, args: argparse.Namespace
) -> RunSummary:
    """Closed-loop users, answers of natural length; 429s honour Retry-After."""
    await bench.wait_idle()
    prompts = PromptFactory(seed=23)
    preempted = bench.engine_metric("vllm:num_preemptions_total")
    waits = _queue_wait_totals(gateway)
    results: list[Result] = []
    retries = retries_admitted = 0
    deadline = time.perf_counter() + args.natural_seconds

    async def user(http: httpx.AsyncClient) -> None:
        nonlocal retries, retries_admitted
        retrying = False
        while time.perf_counter() < deadline:
            body = {
                "model": MODEL,
                "messages": prompts.chat(),
                "max_tokens": args.natural_max_tokens,
            }
            result = await stream_chat(http, body)
            results.append(result)
            if retrying:
                retries += 1
                retries_admitted += result.status == 200
            retrying = result.status == 429
            if retrying:
                await asyncio.sleep(result.retry_after or 1.0)

    async with httpx.AsyncClient(
        base_url=url, timeout=600, limits=httpx.Limits(max_connections=None)
    ) as http:
        started = time.perf_counter()
        await asyncio.gather(*(user(http) for _ in range(args.users)))
        seconds = time.perf_counter() - started
    await bench.wait_idle()
    summary = _summarise(
        name,
        results,
        seconds,
        bench.engine_metric("vllm:num_preemptions_total") - preempted,
        _queue_wait_mean(gateway, waits),
    )
    summary.retries, summary.retries_admitted = retries, retries_admitted
    if gateway is not None:
        samples = scrape(gateway)
        capacity = value(samples, "gateway_kv_tokens_capacity")
        if capacity:
            summary.overcommit = round(value(samples, "gateway_kv_tokens_budget") / capacity, 2)
    return summary


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def print_table(title: str, rows: list[RunSummary]) -> None:
    print(f"\n{title}")
    header = (
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
    )
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for r in rows:
        retry = f"{r.retries_admitted}/{r.retries}" if r.retries else "-"
        print(
            " | ".join(
                [
                    r.name,
                    f"{r.served}/{r.sent}",
                    str(r.rejected),
                    _fmt(r.preemptions, 0),
                    str(r.tokens_per_s),
                    _fmt(r.ttft_p50),
                    _fmt(r.ttft_p99),
                    _fmt(r.queue_wait_mean),
                    _fmt(r.overcommit, 2),
                    retry,
                ]
            )
        )


BURSTS = [
    # (label, target, retry refused requests)
    ("(a) vLLM direct", "direct", False),
    ("(b) gateway, admission off", "admission off", False),
    ("(c) gateway, admission on", "admission on", False),
    ("(d) admission on, 1s queue deadline", "admission on, 1s deadline", False),
    ("(e) as (d), 429s retried after Retry-After", "admission on, 1s deadline", True),
]
NATURALS = [
    ("vLLM direct", "direct"),
    ("full reservation", "full reservation"),
    ("adaptive overcommit", "adaptive overcommit"),
    # A tight deadline: many 429s; users come back after Retry-After.
    ("adaptive, 1s deadline", "admission on, 1s deadline"),
]


async def run_all(args: argparse.Namespace, logs: Path) -> dict[str, list[RunSummary]]:
    bench = Bench(args.kv_blocks, logs)
    try:
        bench.start()

        def where(target: str) -> tuple[str, str | None]:
            if target == "direct":
                return bench.engine_url, None
            return bench.gateways[target], bench.gateways[target]

        # Warm the engine up (the first requests compile and allocate).
        warm_up = argparse.Namespace(requests=4, max_tokens=16)
        await burst(bench, "warm-up", bench.engine_url, None, warm_up)
        results: dict[str, list[RunSummary]] = {"burst": [], "natural": []}
        parts = args.parts.split(",")
        for label, target, retry in BURSTS if "burst" in parts else []:
            url, gateway = where(target)
            results["burst"].append(await burst(bench, label, url, gateway, args, retry))
        if args.natural_seconds > 0 and "natural" in parts:
            for label, target in NATURALS:
                url, gateway = where(target)
                results["natural"].append(await natural(bench, label, url, gateway, args))
        return results
    finally:
        bench.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-") as logs:
        results = asyncio.run(run_all(args, Path(logs)))
    if results["burst"]:
        print_table(
            f"Burst: {args.requests} concurrent streams, max_tokens {args.max_tokens},"
            f" ignore_eos, KV {args.kv_blocks} blocks",
            results["burst"],
        )
    if results["natural"]:
        print_table(
            f"Natural lengths: {args.users} closed-loop chat users for {args.natural_seconds:g}s,"
            f" max_tokens {args.natural_max_tokens}",
            results["natural"],
        )
    if args.json:
        runs = {part: [asdict(r) for r in rows] for part, rows in results.items()}
        Path(args.json).write_text(json.dumps(runs, indent=2) + "\n")


if __name__ == "__main__":
    main()
