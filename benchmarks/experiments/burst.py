"""Sending a fixed set of prompts to the engine and measuring what it did.

Each request is a non-streaming ``/v1/completions`` call with ``ignore_eos``
and a fixed ``max_tokens``, greedy — the course's ``LLM.generate`` on a list
of prompts, over HTTP. ``concurrency`` 1 sends them one after another (the
naive loop's order); ``concurrency`` = the number of prompts sends them all
at once. The engine's counters are read before and after (the engine idle
both times); its gauges are sampled while the requests run (peak running,
waiting, KV usage).
"""

import asyncio
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.experiments.engine import (
    GENERATED,
    KV_USAGE,
    PREEMPTIONS,
    QUEUE_TIME_COUNT,
    QUEUE_TIME_SUM,
    RUNNING,
    WAITING,
)
from benchmarks.harness import Call, Client, measured

SAMPLE_SECONDS = 0.2
# Text, or token ids (an exact length: the capacity surface's bursts).
Prompt = str | list[int]


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


async def _measure(
    url: str, model: str, prompts: Sequence[Prompt], max_tokens: int, concurrency: int
) -> Run:
    gate = asyncio.Semaphore(concurrency)
    async with Client(url) as client:

        async def one(prompt: Prompt) -> Call:
            body = {
                "model": model,
                "prompt": prompt,
                "max_tokens": max_tokens,
                "ignore_eos": True,
                "temperature": 0.0,
            }
            async with gate:
                return await client.complete(body, path="/v1/completions")

        async with measured(
            client,
            {"engine": url},
            (PREEMPTIONS, GENERATED, QUEUE_TIME_SUM, QUEUE_TIME_COUNT),
            idle=[url],
            sampled={"engine": url},
            series=(RUNNING, WAITING, KV_USAGE),
            period=SAMPLE_SECONDS,
        ) as window:
            calls = await asyncio.gather(*(one(p) for p in prompts))
    done = [c for c in calls if c.status == 200]
    queued = window.delta(QUEUE_TIME_COUNT)
    return Run(
        requests=len(prompts),
        concurrency=concurrency,
        seconds=window.seconds,
        output_tokens=sum(c.completion_tokens for c in done),
        latencies=[c.latency for c in done],
        failed=len(calls) - len(done),
        preemptions=window.delta(PREEMPTIONS),
        engine_tokens=window.delta(GENERATED),
        queue_time_mean=window.delta(QUEUE_TIME_SUM) / queued if queued else 0,
        peak_running=max(window.series("engine", RUNNING), default=0.0),
        peak_waiting=max(window.series("engine", WAITING), default=0.0),
        peak_kv_usage=max(window.series("engine", KV_USAGE), default=0.0),
    )


def measure(
    url: str, model: str, prompts: Sequence[Prompt], max_tokens: int, concurrency: int
) -> Run:
    return asyncio.run(_measure(url, model, prompts, max_tokens, concurrency))


def warm_up(url: str, model: str) -> None:
    """One short request first: the course times after start-up, deliberately."""
    measure(url, model, ["Warm up."], 8, 1)


def median_run(runs: list[Run]) -> Run:
    """The repeat with the median throughput (a real run, not a blend)."""
    ordered = sorted(runs, key=lambda run: run.tokens_per_s)
    return ordered[len(ordered) // 2]
