"""The rows: closed-loop users against every target in rotated order, round
after round, and what each row and target come to across the rounds (each
ratio paired with the direct run of its own round)."""

import argparse
import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.harness import Call, Client, Window, closed_loop, ms, q, tokens_within
from benchmarks.overhead.spread import spread
from benchmarks.overhead.targets import NAMES, CpuSnapshot, OverheadBench

PREEMPTIONS = "vllm:num_preemptions_total"


@dataclass
class Row:
    label: str
    users: int
    streaming: bool


@dataclass
class Run:
    """One closed-loop run against one target. CPU seconds are read from
    /proc at the start and at the end of the measured window (not after the
    requests still running at its end), so they divide by the tokens that
    arrived inside the window."""

    layout: str
    row: str
    target: str
    repeat: int
    window_s: float
    requests: int
    errors: int
    tokens: int
    tokens_in_window: float
    tokens_per_s: float
    tokens_per_event: float | None
    ttft_p50: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p99: float | None
    proxy_cpu_s: float | None
    # The kernel's part of it (the sockets' syscalls).
    proxy_kernel_cpu_s: float | None
    engine_api_cpu_s: float
    client_cpu_s: float
    preemptions: float
    others_cores: float
    ttfts: list[float] = field(default_factory=list, repr=False)
    gaps: list[float] = field(default_factory=list, repr=False)
    # TTFT less the engine's own queue and time to first token, per request
    # (where the engine said them).
    residuals: list[float] = field(default_factory=list, repr=False)

    def summary(self) -> dict[str, Any]:
        data = asdict(self)
        del data["ttfts"], data["gaps"], data["residuals"]
        return data

    def per_1k(self, cpu: float | None) -> float | None:
        if cpu is None or self.tokens_in_window <= 0:
            return None
        return 1000 * cpu / self.tokens_in_window

    def per_1k_chunks(self, cpu: float | None) -> float | None:
        """CPU per 1,000 chunks: what a relay does per chunk, whatever
        number of tokens the engine put in each."""
        per_token = self.per_1k(cpu)
        if per_token is None or self.tokens_per_event is None:
            return None
        return per_token * self.tokens_per_event


def rows_of(args: argparse.Namespace) -> list[Row]:
    rows = [Row(str(n), n, True) for n in args.streams]
    if args.non_stream_users:
        rows.append(Row(f"{args.non_stream_users} non-streaming", args.non_stream_users, False))
    return rows


async def measured_run(
    bench: OverheadBench, row: Row, target: str, repeat: int, seconds: float, max_tokens: int
) -> Run:
    """One closed-loop run; CPU read where the measured window begins and
    ends; requests still running at the end are waited for."""
    # The first moments are left out of rates, latencies and CPU: every
    # user starts at once.
    settle = min(2.0, seconds / 5)
    async with Client(bench.url(target)) as client:

        async def one(user: int) -> Call:
            body = bench.body(max_tokens)
            return await (client.stream(body) if row.streaming else client.complete(body))

        async def read_cpu() -> Reading:
            await asyncio.sleep(settle)
            start, before = time.perf_counter(), bench.cpu(target)
            await asyncio.sleep(max(0.0, window.started + seconds - time.perf_counter()))
            return Reading(start, before, time.perf_counter(), bench.cpu(target))

        async with bench.measure(client, (PREEMPTIONS,)) as window:
            reading = asyncio.create_task(read_cpu())
            calls = await closed_loop(row.users, seconds, one)
            cpu = await reading
    return summarise(bench.layout, row, target, repeat, calls, window, cpu)


@dataclass
class Reading:
    """CPU read where the measured window begins and where it ends (times
    from ``time.perf_counter``)."""

    start: float
    before: CpuSnapshot
    end: float
    after: CpuSnapshot


def summarise(
    layout: str, row: Row, target: str, repeat: int, calls: list[Call], window: Window, cpu: Reading
) -> Run:
    start, end, before, after = cpu.start, cpu.end, cpu.before, cpu.after
    ok = [c for c in calls if c.status == 200]
    measured = [c for c in ok if c.started >= start]
    ttfts = [t for c in measured if (t := c.ttft) is not None]
    gaps = [g for c in measured for g in c.gaps]
    streamed = [c for c in ok if c.streamed and c.events]
    events = sum(c.events for c in streamed)
    proxy_cpu = proxy_kernel = None
    if before.proxy is not None and after.proxy is not None:
        proxy_cpu = after.proxy - before.proxy
    if before.proxy_kernel is not None and after.proxy_kernel is not None:
        proxy_kernel = after.proxy_kernel - before.proxy_kernel
    in_window = tokens_within(ok, start, end)
    return Run(
        layout=layout,
        row=row.label,
        target=target,
        repeat=repeat,
        window_s=round(end - start, 2),
        requests=len(calls),
        errors=len(calls) - len(ok),
        tokens=sum(c.completion_tokens for c in ok),
        tokens_in_window=round(in_window, 1),
        tokens_per_s=in_window / (end - start),
        tokens_per_event=sum(c.completion_tokens for c in streamed) / events if events else None,
        ttft_p50=q(ttfts, 0.5),
        ttft_p99=q(ttfts, 0.99),
        itl_p50=q(gaps, 0.5),
        itl_p99=q(gaps, 0.99),
        proxy_cpu_s=proxy_cpu,
        proxy_kernel_cpu_s=proxy_kernel,
        engine_api_cpu_s=after.engine_api - before.engine_api,
        client_cpu_s=after.client - before.client,
        preemptions=window.delta(PREEMPTIONS),
        others_cores=round(window.others_cores, 3),
        ttfts=ttfts,
        gaps=gaps,
        residuals=[r for c in measured if (r := c.residual) is not None],
    )


def rotated(targets: list[str], k: int) -> list[str]:
    """The targets in round ``k``'s order: over as many rounds as there are
    targets, each runs once in every place (none always first, or last)."""
    k %= len(targets)
    return targets[k:] + targets[:k]


async def run_rows(bench: OverheadBench, args: argparse.Namespace) -> list[Run]:
    runs: list[Run] = []
    for repeat in range(args.repeats):
        for i, row in enumerate(rows_of(args)):
            for target in rotated(bench.targets, repeat + i):
                run = await measured_run(bench, row, target, repeat, args.seconds, args.max_tokens)
                runs.append(run)
                print(
                    f"  {bench.layout}, round {repeat + 1}, {row.label:>16}, {NAMES[target]:<24}"
                    f" {run.tokens_per_s:8.0f} tok/s  TTFT p99 {ms(run.ttft_p99)} ms"
                    f"  errors {run.errors}  preempt {run.preemptions:.0f}",
                    flush=True,
                )
    return runs


def aggregate(runs: list[Run], rows: list[Row], targets: list[str]) -> list[dict[str, Any]]:
    """Per row and target across the rounds: the throughput ratio to the
    direct run of the same round, tok/s, TTFT p99 and CPU per 1,000 tokens
    as median (min–max) of the rounds; latencies pooled over the rounds."""
    out: list[dict[str, Any]] = []
    by_key = {(r.row, r.target, r.repeat): r for r in runs}
    for row in rows:
        direct = [r for r in runs if r.row == row.label and r.target == "direct"]
        d_ttft = [t for r in direct for t in r.ttfts]
        d_residual = [t for r in direct for t in r.residuals]
        for target in targets:
            mine = [r for r in runs if r.row == row.label and r.target == target]
            if not mine:
                continue
            ratios = []
            for r in mine:
                base = by_key.get((row.label, "direct", r.repeat))
                if base is not None and base.tokens_per_s > 0:
                    ratios.append(r.tokens_per_s / base.tokens_per_s)
            ttfts = [t for r in mine for t in r.ttfts]
            gaps = [g for r in mine for g in r.gaps]
            p50, p99 = q(ttfts, 0.5), q(ttfts, 0.99)
            d50, d99 = q(d_ttft, 0.5), q(d_ttft, 0.99)
            residuals = [t for r in mine for t in r.residuals]

            def across(values: list[float | None]) -> dict[str, float] | None:
                return spread([v for v in values if v is not None])

            out.append(
                {
                    "row": row.label,
                    "target": target,
                    "runs": len(mine),
                    "tokens_per_s": across([r.tokens_per_s for r in mine]),
                    "ratio": across(list(ratios)) if target != "direct" else None,
                    "ttft_p50": p50,
                    "ttft_p99": p99,
                    "ttft_p99_rounds": across([r.ttft_p99 for r in mine]),
                    "added_ttft_p50": None if p50 is None or d50 is None else p50 - d50,
                    "added_ttft_p99": None if p99 is None or d99 is None else p99 - d99,
                    "residual_p50": q(residuals, 0.5),
                    "residual_p99": q(residuals, 0.99),
                    "residual_over_direct": _over(residuals, d_residual),
                    "itl_p50": q(gaps, 0.5),
                    "itl_p99": q(gaps, 0.99),
                    "tokens_per_event": across([r.tokens_per_event for r in mine]),
                    "proxy_cpu_per_1k": across([r.per_1k(r.proxy_cpu_s) for r in mine]),
                    "proxy_kernel_cpu_per_1k": across(
                        [r.per_1k(r.proxy_kernel_cpu_s) for r in mine]
                    ),
                    "proxy_cpu_per_1k_chunks": across(
                        [r.per_1k_chunks(r.proxy_cpu_s) for r in mine]
                    ),
                    "engine_api_cpu_per_1k": across([r.per_1k(r.engine_api_cpu_s) for r in mine]),
                    "client_cpu_per_1k": across([r.per_1k(r.client_cpu_s) for r in mine]),
                    "errors": sum(r.errors for r in mine),
                    "preemptions": sum(r.preemptions for r in mine),
                    "others_cores_max": max(r.others_cores for r in mine),
                }
            )
    return out


def _over(mine: list[float], direct: list[float]) -> dict[str, float] | None:
    """What ``mine``'s residuals add to direct's, at p50 and p99 (pooled
    over the rounds); None where either has none."""
    if not mine or not direct:
        return None
    return {f"p{int(p * 100)}": q(mine, p) - q(direct, p) for p in (0.5, 0.99)}  # type: ignore[operator]
