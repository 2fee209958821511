"""Overload: many more closed-loop streaming users than the engine runs at
once, against every target: throughput, served TTFT, 429s and whether they
were true, and where the excess waits — the engine's
``vllm:num_requests_waiting`` and ``vllm:num_requests_running`` against the
gateway's ``gateway_queue_depth``, all sampled every second.

Two clients: one that honours ``Retry-After`` (comes back when told), and
one that comes back at once, as many real clients do. Every gateway is
fresh for each cell (``--overload-warm`` keeps them): a burst on a gateway
that learned nothing yet is the case users meet first. Figures are counted
from t=0 (the burst's start), and also after the first seconds (settled).
A refusal is checked after the fact: did the user that honoured its
``Retry-After`` get admitted when it came back? And every target's requests
are counted against the gateway's queue deadline (``in_time``: served with a
first token within it): what a user with that deadline got. A gateway that
serves as many in time as direct does in the same round refused nothing the
engine would have served in time."""

import argparse
from collections import defaultdict
from itertools import pairwise
from typing import Any

from app.settings import Settings
from benchmarks.harness import Call, Client, closed_loop, num, q, tokens_within
from benchmarks.overhead.engine_cpu import EngineCpu, raw, split
from benchmarks.overhead.first_batch import first_batch, tokens_per_event
from benchmarks.overhead.rows import PREEMPTIONS, rotated
from benchmarks.overhead.targets import GATEWAYS, NAMES, OverheadBench, engine_cpus
from deploy.stack import parse_cpus

GENERATED = "vllm:generation_tokens_total"
ENGINE_SERIES = ("vllm:num_requests_waiting", "vllm:num_requests_running", GENERATED)
GATEWAY_SERIES = ("gateway_queue_depth", "gateway_requests_in_flight")
# Refusals within this long of the start are the burst's.
EARLY_S = 5.0


async def run_overload(bench: OverheadBench, args: argparse.Namespace) -> list[dict[str, Any]]:
    targets = [t for t in args.overload_targets if t in bench.targets]
    results = []
    for repeat in range(args.overload_repeats):
        for client in args.overload_clients:
            for target in rotated(targets, repeat):
                if target in GATEWAYS and not args.overload_warm:
                    bench.restart(target)
                r = await overload_once(bench, args, target, repeat, client)
                results.append(r)
                print(
                    f"  {bench.layout}, overload round {repeat} {client:<9}"
                    f" {NAMES[target]:<30} {num(r['tokens_per_s_all'])} tok/s"
                    f"  served {r['served']}/{r['sent']}  429 {r['rejected_429']}"
                    f" (early {r['rejected_early']}, Retry-After max"
                    f" {num(r['retry_after_max'], 1)})  TTFT p99 {num(r['ttft_p99_all'], 2)} s"
                    f"  engine running {num(r['engine_running_mean'], 1)}",
                    flush=True,
                )
    return results


def deadline_of(args: argparse.Namespace) -> float:
    """The gateway's queue deadline in this run: ``GATEWAY_QUEUE_TIMEOUT``
    as ``--gateway-env`` sets it, else the setting's default."""
    for kv in args.gateway_env:
        name, _, value = kv.partition("=")
        if name == "GATEWAY_QUEUE_TIMEOUT":
            return float(value)
    default = Settings.model_fields["queue_timeout"].default
    assert isinstance(default, float)
    return default


def in_time(calls: list[Call], deadline: float) -> tuple[int, int]:
    """(served with a first token within ``deadline`` of being sent, served
    later): of a stream, what a user who gives up at the deadline got."""
    ttfts = [c.ttft for c in calls if c.status == 200]
    on_time = sum(1 for t in ttfts if t is not None and t <= deadline)
    return on_time, len(ttfts) - on_time


def came_back(calls: list[Call]) -> tuple[int, int]:
    """Of the refusals followed by another call of the same user, how many
    such next calls were admitted (status 200)."""
    by_user: dict[int, list[Call]] = defaultdict(list)
    for c in sorted(calls, key=lambda c: c.started):
        by_user[c.user].append(c)
    returned = admitted = 0
    for own in by_user.values():
        for refused, after in pairwise(own):
            if refused.status == 429:
                returned += 1
                admitted += after.status == 200
    return returned, admitted


async def overload_once(
    bench: OverheadBench, args: argparse.Namespace, target: str, repeat: int, client_kind: str
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

        engine_cpu = EngineCpu(bench.engine.pid, parse_cpus(engine_cpus(bench.layout)))
        async with bench.measure(
            client, (PREEMPTIONS,), sampled=sampled, series=ENGINE_SERIES + GATEWAY_SERIES
        ) as window:
            with engine_cpu:
                calls = await closed_loop(
                    args.overload_users,
                    args.overload_seconds,
                    one,
                    retry_after=client_kind == "honour",
                )
    t0 = window.started
    settle = min(5.0, args.overload_seconds / 5)
    start, end = t0 + settle, t0 + args.overload_seconds
    served = [c for c in calls if c.status == 200]
    refused = [c for c in calls if c.status == 429]
    ttfts = [t for c in served if c.started >= start and (t := c.ttft) is not None]
    ttfts_all = [t for c in served if (t := c.ttft) is not None]
    # What everything in front of the engine's core added (settled), where
    # the engine said its own queue and time to first token, less the
    # gateway's arrival to admission: under overload the burst waits in the
    # gateway's queue instead of the engine's, which is not the relay's work.
    residuals = [r for c in served if c.started >= start and (r := c.relay_residual) is not None]
    waiting = window.series("engine", "vllm:num_requests_waiting", start, end)
    running = window.series("engine", "vllm:num_requests_running", start, end)
    running_all = window.series("engine", "vllm:num_requests_running", t0, end)
    queue = window.series("gateway", "gateway_queue_depth", start, end)
    returned, admitted = came_back(calls)
    deadline = deadline_of(args)
    on_time, late = in_time(calls, deadline)

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    batch = first_batch(served, t0, args.max_num_seqs)
    codes: dict[str, int] = defaultdict(int)
    for c in refused:
        codes[c.error_code or "?"] += 1
    return {
        "layout": bench.layout,
        "target": target,
        "repeat": repeat,
        "client": client_kind,
        "sent": len(calls),
        "served": len(served),
        "rejected_429": len(refused),
        "rejected_early": sum(1 for c in refused if c.started - t0 < EARLY_S),
        "rejected_by_code": dict(codes),
        "retry_after_max": max((c.retry_after or 0.0 for c in refused), default=None),
        "came_back": returned,
        "came_back_admitted": admitted,
        "deadline_s": deadline,
        "in_time": on_time,
        "late": late,
        "other_errors": sum(1 for c in calls if c.status not in (200, 429)),
        "tokens_per_s": tokens_within(served, start, end) / (end - start),
        "tokens_per_s_all": tokens_within(served, t0, end) / (end - t0),
        # What the engine generated meanwhile (settled), from its counter
        # sampled every second: a client that reads more slowly than the
        # engine generates shows here as tokens_per_s below it.
        "engine_tokens_per_s": window.rate("engine", GENERATED, start, end),
        # And from t=0 (the sampler's first read comes just after it, before
        # the engine's first token): behind a relay that shares the client's
        # core, what the engine generated against what the client read.
        "engine_tokens_per_s_all": window.rate("engine", GENERATED, t0, end),
        "ttft_p50": q(ttfts, 0.5),
        "ttft_p99": q(ttfts, 0.99),
        "ttft_p99_all": q(ttfts_all, 0.99),
        "residual_p50": q(residuals, 0.5),
        "residual_p99": q(residuals, 0.99),
        "engine_waiting_mean": mean(waiting),
        "engine_waiting_max": max(waiting) if waiting else None,
        "engine_running_mean": mean(running),
        "engine_running_mean_all": mean(running_all),
        "gateway_queue_mean": mean(queue),
        "gateway_queue_max": max(queue) if queue else None,
        "preemptions": window.delta(PREEMPTIONS),
        "others_cores": round(window.others_cores, 3),
        "first_batch": batch,
        # The engine's cores while the first batch streamed (to its median
        # end) and once settled: its API server, its engine core, the others.
        "engine_cpu_first_batch": (
            split(engine_cpu.readings, t0, t0 + batch["end_p50"]) if batch else None
        ),
        "engine_cpu_settled": split(engine_cpu.readings, start, end),
        # Every reading (benchmarks.overhead.engine_cpu.raw), for what the
        # two stretches above do not show.
        "engine_cpu_readings": raw(engine_cpu.readings, t0),
        "tokens_per_event": tokens_per_event(served),
    }
