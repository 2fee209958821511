"""The prefix benchmark's runs (``benchmarks.prefix``): two engines, a
gateway or vllm-router per setting in front of both, closed-loop users."""

import argparse
import math
import random
from pathlib import Path
from typing import Any

from app.settings import Settings
from benchmarks.harness import (
    Bench,
    Call,
    Client,
    Processes,
    Service,
    Window,
    benchmark_parser,
    by_label,
    closed_loop,
    q,
    run_benchmark,
    tokens_within,
    wait_ready,
)
from benchmarks.prefix import __doc__ as DOC
from benchmarks.prefix import settings
from benchmarks.prefix.prompts import Documents, Prompts
from benchmarks.prefix.results import aggregate, estimate_error
from benchmarks.prefix.settings import Setting
from benchmarks.prefix.tables import render, setting_line

ENGINE_COUNTERS = (
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
    "vllm:num_preemptions_total",
)
GATEWAY_COUNTERS = (
    "gateway_routing_affinity_hits_total",
    "gateway_routing_load_cap_overrides_total",
    "gateway_routing_kv_fallbacks_total",
    "gateway_routing_affinity_waits_total",
    "gateway_engine_requests_total",
)
IN_FLIGHT = "gateway_engine_requests_in_flight"
# The load cap a setting that leaves it runs with: the gateway's defaults.
LOAD_FACTOR: float = Settings.model_fields["routing_load_factor"].default
LOAD_SLACK: int = Settings.model_fields["routing_load_slack"].default
ENGINE_LOAD = ("vllm:num_requests_running", "vllm:num_requests_waiting")


class PrefixBench(Bench):
    """Two engines and, per setting, a gateway or vllm-router in front of both."""

    def __init__(self, args: argparse.Namespace, procs: Processes) -> None:
        super().__init__(procs)
        self.args = args
        self.targets: dict[Setting, Service] = {}
        self.chars: dict[str, int] = {}

    def start(self, chosen: list[Setting]) -> None:
        args = self.args
        self.engines = [
            self.procs.engine(f"engine-{i}", kv_blocks=args.kv_blocks, kv_events=True)
            for i in range(2)
        ]
        wait_ready(self.engines)
        for setting in chosen:
            self.targets[setting] = settings.start(
                self.procs, setting, self.engines, self.model, Path(args.gateway_src)
            )
        wait_ready(self.targets.values(), timeout=120)

    async def run(
        self,
        mix: str,
        setting: Setting,
        repeat: int,
        seed: int,
        seconds: float | None = None,
        users: int | None = None,
    ) -> dict[str, Any]:
        args = self.args
        seconds = args.seconds if seconds is None else seconds
        users = args.users if users is None else users
        target = self.targets[setting]
        prompts = Prompts(
            args.prompts, Documents(args.docs, args.doc_chars, seed), self.model, seed
        )
        rng = random.Random(seed)
        weights = [1.0] * args.docs
        if mix == "skewed":
            weights = [args.hot_share] + [(1 - args.hot_share) / (args.docs - 1)] * (args.docs - 1)
        async with Client(target.url) as client:
            async with Client(self.engine.url) as engine:
                await prompts.tokenize(engine)

            async def one(user: int) -> Call:
                doc = rng.choices(range(args.docs), weights)[0]
                request = prompts.request(doc, args.max_tokens)
                call = await client.stream(request.body, path=request.path)
                self.chars[call.request_id] = request.chars
                return call

            counters: tuple[str, ...] = ENGINE_COUNTERS
            gateways: dict[str, str] | None = None
            series: tuple[str, ...] = ENGINE_LOAD
            sampled = {e.name: e.url for e in self.engines}
            if not setting.router:
                counters += GATEWAY_COUNTERS
                gateways = sampled = {"gateway": target.url}
                series = (IN_FLIGHT,)
            async with self.measure(
                client, counters, gateways, sampled=sampled, series=series
            ) as window:
                calls = await closed_loop(users, seconds, one)
        settle = min(5.0, seconds / 5)
        start, end = window.started + settle, window.started + seconds
        served = [c for c in calls if c.status == 200]
        ttfts = [t for c in served if c.started >= start and (t := c.ttft) is not None]

        def gateway_total(name: str) -> float | None:
            """A gateway counter's growth, over its labels (None: a router)."""
            return None if setting.router else window.delta(name, "gateway")

        queries = window.delta("vllm:prefix_cache_queries_total")
        return {
            "mix": mix,
            "setting": setting.name,
            "repeat": repeat,
            "requests": len(calls),
            "served": len(served),
            "refused": sum(1 for c in calls if c.status in (429, 503)),
            "errors": sum(1 for c in calls if c.status not in (200, 429, 503)),
            "hit_rate": window.delta("vllm:prefix_cache_hits_total") / queries if queries else None,
            "prefix_queries": queries,
            "ttft_p50": q(ttfts, 0.5),
            "ttft_p99": q(ttfts, 0.99),
            "tokens_per_s": tokens_within(served, start, end) / (end - start),
            "preemptions": window.delta("vllm:num_preemptions_total"),
            "affinity_hits": gateway_total("gateway_routing_affinity_hits_total"),
            "load_cap_overrides": gateway_total("gateway_routing_load_cap_overrides_total"),
            "kv_fallbacks": gateway_total("gateway_routing_kv_fallbacks_total"),
            "affinity_waits": gateway_total("gateway_routing_affinity_waits_total"),
            "routed": None
            if setting.router
            else window.delta_by("gateway_engine_requests_total", "engine", "gateway"),
            **load_balance(
                per_engine_loads(window, setting, self.engines),
                start,
                end,
                setting.load_factor or LOAD_FACTOR,
            ),
            "others_cores": round(window.others_cores, 3),
        }


def per_engine_loads(
    window: Window, setting: Setting, engines: list[Service]
) -> list[tuple[float, list[float]]]:
    """Each sampled second: what each engine had — the gateway's requests in
    flight there, or (vllm-router) the engine's own running and waiting."""
    rows = window.sampler.rows if window.sampler else []
    if not setting.router:
        return [(at, list(by_label(s, IN_FLIGHT, "engine").values())) for at, _, s in rows]
    by_time: dict[float, dict[str, float]] = {}
    for at, target, samples in rows:
        by_time.setdefault(at, {})[target] = sum(s.value for s in samples if s.name in ENGINE_LOAD)
    names = [e.name for e in engines]
    return [
        (at, [loads[n] for n in names])
        for at, loads in by_time.items()
        if all(n in loads for n in names)
    ]


def load_balance(
    loads: list[tuple[float, list[float]]], start: float, end: float, factor: float
) -> dict[str, Any]:
    """From the per-second loads of the engines: the busiest engine against
    the mean, and against the cap prefix routing allows at that load
    (``max(ceil(factor × fair), ceil(fair) + slack)`` with ``fair = (total
    + 1) / 2``: the setting's load factor, or the gateway's default for a
    router's and every setting that leaves it)."""
    ratios: list[float] = []
    over_cap = 0
    worst_excess = 0
    means: list[float] = []
    for at, values in loads:
        if not start <= at <= end or len(values) < 2 or sum(values) == 0:
            continue
        mean = sum(values) / len(values)
        means.append(mean)
        ratios.append(max(values) / mean)
        fair = (sum(values) + 1) / len(values)
        cap = max(math.ceil(factor * fair), math.ceil(fair) + LOAD_SLACK)
        if max(values) > cap:
            over_cap += 1
            worst_excess = max(worst_excess, int(max(values) - cap))
    return {
        "in_flight_samples": len(ratios),
        "in_flight_mean": sum(means) / len(means) if means else None,
        "max_over_mean_max": max(ratios) if ratios else None,
        "max_over_mean_mean": sum(ratios) / len(ratios) if ratios else None,
        "samples_over_cap": over_cap,
        "worst_excess_over_cap": worst_excess,
    }


def chosen(args: argparse.Namespace) -> tuple[list[Setting], list[Setting]]:
    """The settings of each mix this run compares (``--mixes``,
    ``--settings`` by name)."""
    wanted = [n.strip() for n in args.settings.split(";") if n.strip()]
    unknown = [n for n in wanted if n not in settings.ALL]
    if unknown:
        raise SystemExit(f"unknown settings {unknown}; known: {list(settings.ALL)}")

    def keep(group: list[Setting]) -> list[Setting]:
        return [s for s in group if not wanted or s.name in wanted]

    mixes = args.mixes.split(",")
    rag = keep(settings.RAG) if "rag" in mixes else []
    return rag, keep(settings.SKEWED) if "skewed" in mixes else []


async def run_all(bench: PrefixBench, args: argparse.Namespace) -> dict[str, Any]:
    rag, skewed = chosen(args)
    # Warm-up: compile, allocate, and let every gateway fit its estimate.
    for setting in bench.targets:
        await bench.run("rag", setting, -1, seed=999, seconds=args.warmup, users=4)
    runs = []
    seed = args.seed
    plan = [("rag", s) for s in rag] + [("skewed", s) for s in skewed]
    for repeat in range(args.repeats):
        k = repeat % len(plan)
        for mix, setting in plan[k:] + plan[:k]:
            seed += 1
            run = await bench.run(mix, setting, repeat, seed)
            runs.append(run)
            print(f"  round {repeat + 1}, {mix:<6} {setting_line(run)}", flush=True)
    result: dict[str, Any] = {
        "runs": runs,
        "rag": aggregate(runs, "rag"),
        "skewed": aggregate(runs, "skewed"),
    }
    if args.prompts == "chat":
        docs = Documents(args.docs, args.doc_chars, args.seed + 1)
        result["estimate"] = await estimate_error(
            bench.targets, bench.chars, bench.engine, bench.model, docs
        )
    return result


def main() -> None:
    assert DOC is not None
    parser = benchmark_parser(DOC)
    parser.add_argument("--kv-blocks", type=int, default=48)
    parser.add_argument("--users", type=int, default=24)
    parser.add_argument("--docs", type=int, default=4)
    parser.add_argument("--doc-chars", type=int, default=4000)
    parser.add_argument("--hot-share", type=float, default=0.8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds per setting")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--mixes", default="rag,skewed")
    parser.add_argument("--prompts", choices=("ids", "chat"), default="ids")
    parser.add_argument(
        "--settings",
        default="",
        help=f"';'-separated names (default: all): {'; '.join(settings.ALL)}",
    )
    parser.add_argument("--seed", type=int, default=100)
    args = parser.parse_args()

    async def run(procs: Processes, out: Path) -> dict[str, Any]:
        bench = PrefixBench(args, procs)
        rag, skewed = chosen(args)
        bench.start(list(dict.fromkeys(rag + skewed)))
        return await run_all(bench, args)

    run_benchmark("prefix", args, run, lambda result: render(result, args))


if __name__ == "__main__":
    main()
