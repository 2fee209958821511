"""Sending a fixed set of prompts to the engine and measuring what it did.

Each request is a non-streaming ``/v1/completions`` call with ``ignore_eos``
and a fixed ``max_tokens``, greedy — the course's ``LLM.generate`` on a list
of prompts, over HTTP. ``concurrency`` 1 sends them one after another (the
naive loop's order); ``concurrency`` = the number of prompts sends them all
at once. The engine's counters are read before and after; its gauges are
sampled while the requests run (peak running, waiting, KV usage).
"""

import asyncio
import contextlib
import statistics
import time
from dataclasses import dataclass, field

import httpx

from benchmarks.experiments.engine import (
    GENERATED,
    KV_USAGE,
    PREEMPTIONS,
    QUEUE_TIME_COUNT,
    QUEUE_TIME_SUM,
    RUNNING,
    WAITING,
    counters,
)
from deploy.local import scrape, value

SAMPLE_SECONDS = 0.2


def course_prompts(count: int) -> list[str]:
    """The course's prompts ("Why Inference Servers Exist", Try It)."""
    return [f"Write one sentence about the number {i}." for i in range(count)]


@dataclass
class Run:
    requests: int
    concurrency: int
    seconds: float
    output_tokens: int
    latencies: list[float]
    failed: int
    preemptions: float
    engine_tokens: float
    queue_time_mean: float
    peak_running: float = 0.0
    peak_waiting: float = 0.0
    peak_kv_usage: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def latency_mean(self) -> float:
        return statistics.fmean(self.latencies) if self.latencies else 0.0


@dataclass
class _Peaks:
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    stop: asyncio.Event = field(default_factory=asyncio.Event)


async def _watch(url: str, peaks: _Peaks) -> None:
    while not peaks.stop.is_set():
        try:
            samples = await asyncio.to_thread(scrape, url)
        except httpx.HTTPError:
            samples = []
        peaks.running = max(peaks.running, value(samples, RUNNING))
        peaks.waiting = max(peaks.waiting, value(samples, WAITING))
        peaks.kv_usage = max(peaks.kv_usage, value(samples, KV_USAGE))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(peaks.stop.wait(), SAMPLE_SECONDS)


async def _complete(
    client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int
) -> tuple[float, int]:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    started = time.perf_counter()
    response = await client.post("/v1/completions", json=body)
    response.raise_for_status()
    tokens = int(response.json()["usage"]["completion_tokens"])
    return time.perf_counter() - started, tokens


async def _send_all(
    url: str, model: str, prompts: list[str], max_tokens: int, concurrency: int
) -> tuple[float, list[tuple[float, int] | BaseException]]:
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=900, limits=limits) as client:

        async def one(prompt: str) -> tuple[float, int]:
            async with gate:
                return await _complete(client, model, prompt, max_tokens)

        started = time.perf_counter()
        results = await asyncio.gather(*(one(p) for p in prompts), return_exceptions=True)
        return time.perf_counter() - started, list(results)


async def _measure(
    url: str, model: str, prompts: list[str], max_tokens: int, concurrency: int
) -> Run:
    before = await asyncio.to_thread(counters, url)
    peaks = _Peaks()
    watcher = asyncio.create_task(_watch(url, peaks))
    try:
        seconds, results = await _send_all(url, model, prompts, max_tokens, concurrency)
    finally:
        peaks.stop.set()
        await watcher
    after = await asyncio.to_thread(counters, url)
    done = [r for r in results if isinstance(r, tuple)]
    queued = after[QUEUE_TIME_COUNT] - before[QUEUE_TIME_COUNT]
    return Run(
        requests=len(prompts),
        concurrency=concurrency,
        seconds=seconds,
        output_tokens=sum(tokens for _, tokens in done),
        latencies=[latency for latency, _ in done],
        failed=len(results) - len(done),
        preemptions=after[PREEMPTIONS] - before[PREEMPTIONS],
        engine_tokens=after[GENERATED] - before[GENERATED],
        queue_time_mean=(after[QUEUE_TIME_SUM] - before[QUEUE_TIME_SUM]) / queued if queued else 0,
        peak_running=peaks.running,
        peak_waiting=peaks.waiting,
        peak_kv_usage=peaks.kv_usage,
    )


def measure(url: str, model: str, prompts: list[str], max_tokens: int, concurrency: int) -> Run:
    return asyncio.run(_measure(url, model, prompts, max_tokens, concurrency))


def warm_up(url: str, model: str) -> None:
    """One short request first: the course times after start-up, deliberately."""
    measure(url, model, ["Warm up."], 8, 1)


def median_run(runs: list[Run]) -> Run:
    """The repeat with the median throughput (a real run, not a blend)."""
    ordered = sorted(runs, key=lambda run: run.tokens_per_s)
    return ordered[len(ordered) // 2]
