"""Cutting a run into its steps and naming the phases the data shows.

The material's two stages: first *graceful* — more users, latency rises,
throughput holds or grows, the engine never preempts and its waiting queue
empties; then past the *knee* — the KV cache runs out, the scheduler preempts
running requests or keeps requests waiting. Pure functions; the detector is
unit-tested on synthetic step tables.
"""

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from loadtests.schedule import Stage

# A waiting queue counts as persistent when it is non-empty in at least this
# share of a step's samples.
PERSISTENT = 0.5
# Throughput has "flattened" once a step reaches this share of the run's best.
PLATEAU = 0.90
# The first part of each step is left out: the system is still settling.
SETTLE = 0.25


@dataclass
class Step:
    users: int
    seconds: float
    requests: int = 0
    refused: int = 0
    tokens_per_s: float = 0.0
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    itl_p50: float | None = None
    itl_p99: float | None = None
    running: float = 0.0
    waiting: float = 0.0
    waiting_share: float = 0.0
    kv_usage: float = 0.0
    kv_usage_max: float = 0.0
    preemptions: float = 0.0
    gateway_queue: float = 0.0
    gateway_queue_share: float = 0.0
    gateway_rejections: float = 0.0


def quantile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank quantile, or None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _delta(samples: Sequence[dict[str, float]], name: str) -> float:
    values = [s[name] for s in samples if name in s]
    return max(0.0, values[-1] - values[0]) if len(values) > 1 else 0.0


def build_steps(
    stages: Sequence[Stage],
    t0: float,
    records: Sequence[dict[str, Any]],
    samples: Sequence[dict[str, float]],
) -> list[Step]:
    steps = []
    for stage in stages:
        start = t0 + stage.start + SETTLE * stage.seconds
        end = t0 + stage.end
        # Every request a step's users started counts for it (at a step past
        # the knee, the ones started when the users arrived may be all there
        # are); the engine's samples skip the step's first moments.
        mine = [r for r in records if t0 + stage.start <= r["start"] < end]
        window = [s for s in samples if start <= s["t"] <= end]
        served = [r for r in mine if r["status"] == 200]
        step = Step(users=stage.users, seconds=end - start, requests=len(mine))
        step.refused = sum(1 for r in mine if r["status"] in (429, 503))
        ttfts = [r["ttft"] for r in served if r["ttft"] is not None]
        itls = [r["itl"] for r in served if r["itl"] is not None]
        step.ttft_p50, step.ttft_p99 = quantile(ttfts, 0.5), quantile(ttfts, 0.99)
        step.itl_p50, step.itl_p99 = quantile(itls, 0.5), quantile(itls, 0.99)
        if window:
            span = max(1e-9, window[-1]["t"] - window[0]["t"])
            step.tokens_per_s = _delta(window, "vllm:generation_tokens_total") / span
            step.running = statistics.fmean(s.get("vllm:num_requests_running", 0) for s in window)
            waiting = [s.get("vllm:num_requests_waiting", 0) for s in window]
            step.waiting = statistics.fmean(waiting)
            step.waiting_share = sum(1 for w in waiting if w > 0) / len(waiting)
            usage = [s.get("vllm:kv_cache_usage_perc", 0) for s in window]
            step.kv_usage, step.kv_usage_max = statistics.fmean(usage), max(usage)
            step.preemptions = _delta(window, "vllm:num_preemptions_total")
            queue = [s.get("gateway_queue_depth", 0) for s in window]
            step.gateway_queue = statistics.fmean(queue)
            step.gateway_queue_share = sum(1 for q in queue if q > 0) / len(queue)
            step.gateway_rejections = _delta(window, "gateway_rejections_total")
        steps.append(step)
    return steps


@dataclass
class Phases:
    graceful: list[int]
    knee: int | None
    preempting: list[int]
    saturation: int | None
    gateway_holding: list[int]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def past_knee(step: Step) -> bool:
    return step.preemptions > 0 or step.waiting_share >= PERSISTENT


def detect_phases(steps: Sequence[Step]) -> Phases:
    """Indices of the graceful steps, the knee, the preempting steps, the step
    where throughput reaches its plateau (within 10% of the run's best), and
    the steps where the gateway held load back (a persistent queue or
    refusals)."""
    knee = next((i for i, step in enumerate(steps) if past_knee(step)), None)
    graceful = list(range(len(steps) if knee is None else knee))
    preempting = [i for i, step in enumerate(steps) if step.preemptions > 0]
    best = max((step.tokens_per_s for step in steps), default=0.0)
    saturation = next(
        (i for i, step in enumerate(steps) if best > 0 and step.tokens_per_s >= PLATEAU * best),
        None,
    )
    holding = [
        i
        for i, step in enumerate(steps)
        if step.gateway_queue_share >= PERSISTENT or step.refused > 0 or step.gateway_rejections > 0
    ]
    return Phases(graceful, knee, preempting, saturation, holding)
