"""Routing between two engines: prefix affinity with bounded load against
least loaded, each with and without prefix-aware KV demand.

    make bench-prefix                      # or: .venv/bin/python -m benchmarks.prefix

Starts two engines with a small KV cache each (``--kv-blocks``, 48 blocks of
128 tokens), both pinned to the engine core (they share it: the comparison
is between routings, on the same engines), and one gateway per setting in
front of both (``GATEWAY_UPSTREAM_URLS``; ``GATEWAY_ROUTING``,
``GATEWAY_PREFIX_AWARE_DEMAND``); the runs take turns, one at a time.

1. *RAG mix*: a few long shared documents (``--docs``), many short
   questions: closed-loop streaming users, each request a random document and
   a new question. Per setting: the engines' prefix cache hit rate
   (``vllm:prefix_cache_hits_total`` over ``vllm:prefix_cache_queries_total``,
   deltas summed over both engines), TTFT p50/p99, throughput, preemptions.
2. *Skewed mix*: one hot document takes ``--hot-share`` of the requests.
   ``gateway_engine_requests_in_flight{engine}`` is sampled every second: the
   busiest engine against the mean of both, beside the cap prefix routing
   promises (``GATEWAY_ROUTING_LOAD_FACTOR`` times the fair share, or the
   fair share plus ``GATEWAY_ROUTING_LOAD_SLACK``); affinity hits and
   load-cap overrides.
3. *Estimate*: prefix-aware demand counts a shared prefix in tokens estimated
   from its text. The estimate a gateway fits on the run's requests (their
   characters against the engine's ``usage.prompt_tokens``, from the access
   log) is compared with what the engine counts for each document alone.

Every run draws documents of its own, so no run finds the caches warmed by
an earlier one. Settings take turns in rotated order for ``--repeats`` rounds.
Prints the tables and writes ``result.json``, ``tables.md`` and every
process's log under ``--out``.
"""

import argparse
import math
import random
from pathlib import Path
from typing import Any

from app.admission.estimate import PromptTokenEstimator
from app.routing.prefix_key import CHUNK_CHARS
from benchmarks.harness import (
    Bench,
    Call,
    Client,
    Processes,
    Service,
    Window,
    access_log,
    benchmark_parser,
    by_label,
    closed_loop,
    ms,
    num,
    q,
    run_benchmark,
    sections,
    table,
    tokens_within,
    wait_ready,
)
from loadtests.prompts import CORPUS, PromptFactory

SETTINGS = [
    ("least_loaded", True),
    ("least_loaded", False),
    ("prefix", True),
    ("prefix", False),
]
SKEWED = [("prefix", True), ("least_loaded", True)]
ENGINE_COUNTERS = (
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
    "vllm:num_preemptions_total",
)
GATEWAY_COUNTERS = (
    "gateway_routing_affinity_hits_total",
    "gateway_routing_load_cap_overrides_total",
    "gateway_engine_requests_total",
)
IN_FLIGHT = "gateway_engine_requests_in_flight"


def setting_name(routing: str, aware: bool) -> str:
    return f"{routing}, prefix-aware demand {'on' if aware else 'off'}"


class Documents:
    """Long documents drawn from the tiny model's corpus (a seed each)."""

    def __init__(self, count: int, chars: int, seed: int) -> None:
        text = CORPUS.read_text(encoding="utf-8").replace("\n", " ")
        sentences = [s.strip() + "." for s in text.split(". ") if len(s.strip()) > 20]
        rng = random.Random(seed)
        self.docs = []
        for _ in range(count):
            parts: list[str] = []
            while sum(len(p) + 1 for p in parts) < chars:
                parts.append(rng.choice(sentences))
            self.docs.append(" ".join(parts))

    @staticmethod
    def system(doc: str) -> str:
        return f"Answer from this document only.\n\n{doc}"


class PrefixBench(Bench):
    """Two engines and a gateway per routing setting in front of both."""

    def __init__(self, args: argparse.Namespace, procs: Processes) -> None:
        super().__init__(procs)
        self.args = args
        self.gateways: dict[tuple[str, bool], Service] = {}
        self.chars: dict[str, int] = {}

    def start(self) -> None:
        args = self.args
        self.engines = [
            self.procs.engine(f"engine-{i}", kv_blocks=args.kv_blocks) for i in range(2)
        ]
        wait_ready(self.engines)
        urls = ",".join(e.url for e in self.engines)
        for routing, aware in dict.fromkeys(SETTINGS + SKEWED):
            env = {
                "GATEWAY_UPSTREAM_URLS": urls,
                "GATEWAY_ROUTING": routing,
                "GATEWAY_PREFIX_AWARE_DEMAND": "true" if aware else "false",
                "GATEWAY_LOG_LEVEL": "info",
            }
            name = f"gateway-{routing}-{'aware' if aware else 'plain'}"
            self.gateways[(routing, aware)] = self.procs.gateway(name, env, Path(args.gateway_src))
        wait_ready(self.gateways.values(), timeout=120)

    async def run(
        self,
        mix: str,
        routing: str,
        aware: bool,
        repeat: int,
        seed: int,
        seconds: float | None = None,
        users: int | None = None,
    ) -> dict[str, Any]:
        args = self.args
        seconds = args.seconds if seconds is None else seconds
        users = args.users if users is None else users
        gateway = self.gateways[(routing, aware)]
        docs = Documents(args.docs, args.doc_chars, seed)
        prompts = PromptFactory(seed=seed)
        rng = random.Random(seed)
        weights = [1.0] * args.docs
        if mix == "skewed":
            weights = [args.hot_share] + [(1 - args.hot_share) / (args.docs - 1)] * (args.docs - 1)
        async with Client(gateway.url) as client:

            async def one(user: int) -> Call:
                doc = rng.choices(range(args.docs), weights)[0]
                messages = [
                    {"role": "system", "content": docs.system(docs.docs[doc])},
                    {"role": "user", "content": prompts.question()},
                ]
                body = {
                    "model": self.model,
                    "messages": messages,
                    "max_tokens": args.max_tokens,
                    "ignore_eos": True,
                }
                call = await client.stream(body)
                self.chars[call.request_id] = len("\n".join(m["content"] for m in messages))
                return call

            async with self.measure(
                client,
                ENGINE_COUNTERS + GATEWAY_COUNTERS,
                {"gateway": gateway.url},
                sampled={"gateway": gateway.url},
                series=(IN_FLIGHT,),
            ) as window:
                calls = await closed_loop(users, seconds, one)
        settle = min(5.0, seconds / 5)
        start, end = window.started + settle, window.started + seconds
        served = [c for c in calls if c.status == 200]
        ttfts = [t for c in served if c.started >= start and (t := c.ttft) is not None]

        def per_engine(name: str) -> dict[str, float]:
            """A gateway counter's growth per engine."""
            return window.delta_by(name, "engine", "gateway")

        balance = load_balance(window, start, end)
        routed = per_engine("gateway_engine_requests_total")
        queries = window.delta("vllm:prefix_cache_queries_total")
        return {
            "mix": mix,
            "routing": routing,
            "prefix_aware_demand": aware,
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
            "affinity_hits": sum(per_engine("gateway_routing_affinity_hits_total").values()),
            "load_cap_overrides": sum(
                per_engine("gateway_routing_load_cap_overrides_total").values()
            ),
            "routed": routed,
            **balance,
            "others_cores": round(window.others_cores, 3),
        }


def load_balance(window: Window, start: float, end: float) -> dict[str, Any]:
    """From the per-second samples of requests in flight per engine: the
    busiest engine against the mean, and against the cap prefix routing
    allows at that load (``max(ceil(1.25 × fair), ceil(fair) + 2)`` with
    ``fair = (total + 1) / 2``, the defaults)."""
    ratios: list[float] = []
    over_cap = 0
    worst_excess = 0
    means: list[float] = []
    for at, _, samples in window.sampler.rows if window.sampler else []:
        if not start <= at <= end:
            continue
        loads = list(by_label(samples, IN_FLIGHT, "engine").values())
        if len(loads) < 2 or sum(loads) == 0:
            continue
        mean = sum(loads) / len(loads)
        means.append(mean)
        ratios.append(max(loads) / mean)
        fair = (sum(loads) + 1) / len(loads)
        cap = max(math.ceil(1.25 * fair), math.ceil(fair) + 2)
        if max(loads) > cap:
            over_cap += 1
            worst_excess = max(worst_excess, int(max(loads) - cap))
    return {
        "in_flight_samples": len(ratios),
        "in_flight_mean": sum(means) / len(means) if means else None,
        "max_over_mean_max": max(ratios) if ratios else None,
        "max_over_mean_mean": sum(ratios) / len(ratios) if ratios else None,
        "samples_over_cap": over_cap,
        "worst_excess_over_cap": worst_excess,
    }


async def estimate_error(bench: PrefixBench, seed: int) -> dict[str, Any]:
    """The gateway's prompt estimate against the engine's count for each
    document alone: the estimator fitted on the runs' requests (characters
    and ``usage.prompt_tokens`` from the access logs, in order), and the
    default one a gateway starts with."""
    fitted = PromptTokenEstimator()
    for gateway in bench.gateways.values():
        for record in access_log(gateway):
            chars = bench.chars.get(record["request_id"])
            tokens = record.get("prompt_tokens")
            if chars is not None and tokens and record.get("outcome") == "completed":
                fitted.observe("chat", chars, int(tokens))
    cold = PromptTokenEstimator()
    docs = Documents(bench.args.docs, bench.args.doc_chars, seed)
    rows: list[dict[str, Any]] = []
    block = 128
    async with Client(bench.engines[0].url) as client:
        for doc in docs.docs:
            text = docs.system(doc)
            body = {
                "model": bench.model,
                "messages": [{"role": "system", "content": text}],
                "max_tokens": 1,
            }
            call = await client.complete(body)
            if call.status != 200 or call.prompt_tokens is None:
                continue
            engine_tokens = int(call.prompt_tokens)
            # What prefix-aware demand counts: the tokens up to the last whole
            # piece of CHUNK_CHARS characters.
            pieces = len(text) // CHUNK_CHARS
            rows.append(
                {
                    "chars": len(text),
                    "engine_tokens": engine_tokens,
                    "fitted": fitted.estimate("chat", len(text)),
                    "default": cold.estimate("chat", len(text)),
                    "fitted_whole_pieces": fitted.estimate("chat", pieces * CHUNK_CHARS),
                    "engine_blocks": engine_tokens // block,
                    "fitted_blocks": fitted.estimate("chat", pieces * CHUNK_CHARS) // block,
                }
            )
    for r in rows:
        r["fitted_error"] = (r["fitted"] - r["engine_tokens"]) / r["engine_tokens"]
        r["default_error"] = (r["default"] - r["engine_tokens"]) / r["engine_tokens"]
    return {"documents": rows}


def aggregate(runs: list[dict[str, Any]], mix: str) -> list[dict[str, Any]]:
    out = []
    for routing, aware in dict.fromkeys((r["routing"], r["prefix_aware_demand"]) for r in runs):
        mine = [
            r
            for r in runs
            if r["mix"] == mix and r["routing"] == routing and r["prefix_aware_demand"] == aware
        ]
        if not mine:
            continue
        queries = sum(r["prefix_queries"] for r in mine)

        def mean(key: str, rows: list[dict[str, Any]] = mine) -> float | None:
            values = [r[key] for r in rows if r[key] is not None]
            return sum(values) / len(values) if values else None

        hits = sum((r["hit_rate"] or 0) * r["prefix_queries"] for r in mine)
        out.append(
            {
                "mix": mix,
                "routing": routing,
                "prefix_aware_demand": aware,
                "runs": len(mine),
                "hit_rate": hits / queries if queries else None,
                "hit_rate_runs": [r["hit_rate"] for r in mine],
                "ttft_p50": mean("ttft_p50"),
                "ttft_p99": mean("ttft_p99"),
                "tokens_per_s": mean("tokens_per_s"),
                "preemptions": sum(r["preemptions"] for r in mine),
                "served": sum(r["served"] for r in mine),
                "refused": sum(r["refused"] for r in mine),
                "errors": sum(r["errors"] for r in mine),
                "affinity_hits": sum(r["affinity_hits"] for r in mine),
                "load_cap_overrides": sum(r["load_cap_overrides"] for r in mine),
                "max_over_mean_max": max(
                    (r["max_over_mean_max"] for r in mine if r["max_over_mean_max"]), default=None
                ),
                "max_over_mean_mean": mean("max_over_mean_mean"),
                "samples_over_cap": sum(r["samples_over_cap"] for r in mine),
                "in_flight_samples": sum(r["in_flight_samples"] for r in mine),
                "in_flight_mean": mean("in_flight_mean"),
            }
        )
    return out


def mix_table(rows: list[dict[str, Any]], skewed: bool) -> str:
    headers = [
        "setting",
        "prefix cache hit rate (runs)",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "out tok/s",
        "preempt",
        "served (refused)",
        "affinity hits",
        "load-cap overrides",
    ]
    if skewed:
        headers += ["in flight: max/mean, worst second", "mean of seconds", "seconds over cap"]
    body = []
    for r in rows:
        runs = ", ".join("-" if h is None else f"{h:.0%}" for h in r["hit_rate_runs"])
        line = [
            setting_name(r["routing"], r["prefix_aware_demand"]),
            f"{r['hit_rate']:.1%} ({runs})" if r["hit_rate"] is not None else "-",
            ms(r["ttft_p50"], 0),
            ms(r["ttft_p99"], 0),
            num(r["tokens_per_s"]),
            num(r["preemptions"]),
            f"{r['served']} ({r['refused']})",
            num(r["affinity_hits"]),
            num(r["load_cap_overrides"]),
        ]
        if skewed:
            line += [
                num(r["max_over_mean_max"], 2),
                num(r["max_over_mean_mean"], 2),
                f"{r['samples_over_cap']} of {r['in_flight_samples']}",
            ]
        body.append(line)
    return table(headers, body)


def estimate_table(est: dict[str, Any]) -> str:
    headers = [
        "document chars",
        "engine prompt tokens (alone)",
        "fitted estimate",
        "error",
        "default estimate",
        "error",
        "whole blocks: engine / estimate of whole pieces",
    ]
    body = [
        [
            str(r["chars"]),
            str(r["engine_tokens"]),
            str(r["fitted"]),
            f"{r['fitted_error']:+.1%}",
            str(r["default"]),
            f"{r['default_error']:+.1%}",
            f"{r['engine_blocks']} / {r['fitted_blocks']}",
        ]
        for r in est["documents"]
    ]
    return table(headers, body)


async def run_all(bench: PrefixBench, args: argparse.Namespace) -> dict[str, Any]:
    # Warm-up: compile, allocate, and let every gateway fit its estimate.
    for routing, aware in bench.gateways:
        await bench.run("rag", routing, aware, -1, seed=999, seconds=4.0, users=4)
    runs = []
    seed = args.seed
    plan = [("rag", s) for s in SETTINGS] + [("skewed", s) for s in SKEWED]
    plan = [p for p in plan if p[0] in args.mixes.split(",")]
    for repeat in range(args.repeats):
        k = repeat % len(plan)
        for mix, (routing, aware) in plan[k:] + plan[:k]:
            seed += 1
            run = await bench.run(mix, routing, aware, repeat, seed)
            runs.append(run)
            print(
                f"  round {repeat + 1}, {mix:<6} {setting_name(routing, aware):<44}"
                f" hit rate {num(run['hit_rate'], 3)}  TTFT p50 {ms(run['ttft_p50'], 0)} ms"
                f"  {run['tokens_per_s']:.0f} tok/s  preempt {run['preemptions']:.0f}",
                flush=True,
            )
    return {
        "runs": runs,
        "rag": aggregate(runs, "rag"),
        "skewed": aggregate(runs, "skewed"),
        "estimate": await estimate_error(bench, args.seed + 1),
    }


def render(result: dict[str, Any], args: argparse.Namespace) -> str:
    head = (
        f"two engines of {args.kv_blocks} KV blocks, {args.users} closed-loop streaming users,"
        f" {args.docs} documents of about {args.doc_chars} characters, max_tokens"
        f" {args.max_tokens} (ignore_eos), {args.repeats} round(s) of {args.seconds:g} s"
    )
    parts = []
    if result["rag"]:
        parts.append(f"RAG mix: {head}\n\n" + mix_table(result["rag"], skewed=False))
    if result["skewed"]:
        parts.append(
            f"Skewed mix (one document takes {args.hot_share:.0%}): {head}\n\n"
            + mix_table(result["skewed"], skewed=True)
        )
    parts.append(
        "Prefix-aware demand's estimate against the engine's count\n\n"
        + estimate_table(result["estimate"])
    )
    return sections(parts)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--kv-blocks", type=int, default=48)
    parser.add_argument("--users", type=int, default=24)
    parser.add_argument("--docs", type=int, default=4)
    parser.add_argument("--doc-chars", type=int, default=4000)
    parser.add_argument("--hot-share", type=float, default=0.8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--mixes", default="rag,skewed")
    parser.add_argument("--seed", type=int, default=100)
    args = parser.parse_args()

    async def run(procs: Processes, out: Path) -> dict[str, Any]:
        bench = PrefixBench(args, procs)
        bench.start()
        return await run_all(bench, args)

    run_benchmark("prefix", args, run, lambda result: render(result, args))


if __name__ == "__main__":
    main()
