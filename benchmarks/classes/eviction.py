"""Part 4, *eviction*: an engine whose sequences run out before its KV
cache does (a small ``--max-num-seqs``, plenty of blocks), every sequence
held by a long sheddable request (class low), then — once the engine runs
them all, by its own ``vllm:num_requests_running`` — a burst of high-class
requests, half as many as its sequences, each asking for a 1 s TTFT
objective. vLLM preempts for priority only when blocks run out, so alone it
makes the burst wait for sequences to end; a gateway that may stop a
sheddable request for a higher class can start the burst at once. The
burst's attainment, the evictions the gateway counts (confirmed, or wasted:
stopped for nothing), and every low client's outcome: an evicted client
must get exactly one (an error event saying ``evicted`` after its 200 head,
or a 429), never none and never two."""

import argparse
import asyncio
import time
from typing import Any

from app.observe.promtext import total
from benchmarks.classes.load import within
from benchmarks.classes.outcomes import CUT, kind_figures
from benchmarks.classes.requests import Kind, Prompts, body
from benchmarks.classes.rounds import Run, in_rounds
from benchmarks.classes.run import engine_load, gateway_counts, measure
from benchmarks.classes.stack import RUNNING, ClassesStack, Serving
from benchmarks.classes.targets import TARGETS, target
from benchmarks.harness import Call, Client, num

PART = "eviction"
LOW_OUTCOMES = ("completed", "evicted_event", "evicted_429", "refused", "failed", "cut")


def kinds(args: argparse.Namespace) -> tuple[Kind, Kind]:
    return (
        Kind("low", "low", args.eviction_timeout),
        Kind("burst", "high", args.burst_objective, objective_header=True),
    )


def low_outcome(call: Call) -> str:
    """What a sheddable client got: its answer, an eviction (as a stream's
    final error event, or as a 429 before any head), another refusal, a
    failure, or cut by the benchmark at its time limit."""
    if call.status == CUT:
        return "cut"
    if call.error_code == "evicted":
        return "evicted_429" if call.status == 429 else "evicted_event"
    if call.status == 429:
        return "refused"
    return "completed" if call.status == 200 else "failed"


def outcomes_seen(call: Call) -> int:
    """How many outcomes a client was told: an error status is one; a
    stream's completion is one and each error event in it one more. A
    stream that broke off saying nothing was told none."""
    if call.status not in (200, -1, -2):
        return 1
    return (call.status == 200) + call.error_events


async def until_running(client: Client, engine_url: str, count: int, deadline: float) -> float:
    """Wait until the engine runs ``count`` requests (or the deadline
    passes); what it ran when the wait ended."""
    running = 0.0
    while time.perf_counter() < deadline:
        running = total(await client.metrics(engine_url, (RUNNING,)), RUNNING)
        if running >= count:
            break
        await asyncio.sleep(0.1)
    return running


async def run_eviction(stack: ClassesStack, args: argparse.Namespace) -> dict[str, Any]:
    targets = TARGETS[PART]
    await stack.engines_for({t.engine for t in targets})
    low, burst = kinds(args)
    seqs = args.eviction_seqs
    burst_size = args.burst_size or max(1, seqs // 2)

    async def one(name: str, r: int) -> Run:
        t = target(PART, name)
        prompts = Prompts(seed=args.seed + r)
        found: dict[str, float] = {}

        async def load(client: Client, serving: Serving, t0: float) -> list[Call]:
            cut = t0 + args.eviction_timeout

            async def send(kind: Kind, max_tokens: int) -> Call:
                headers, fields = kind.marks(t.marking)
                request = {**body(stack.model, prompts.chat(), max_tokens), **fields}
                return await within(cut, lambda: client.stream(request, headers))

            lows = [asyncio.create_task(send(low, args.low_max_tokens)) for _ in range(seqs)]
            found["running"] = await until_running(client, serving.engine.url, seqs, cut)
            found["burst_at"] = time.perf_counter() - t0
            bursts = await asyncio.gather(
                *(send(burst, args.burst_max_tokens) for _ in range(burst_size))
            )
            calls = []
            for label, group in (("low", await asyncio.gather(*lows)), ("burst", bursts)):
                for i, call in enumerate(group):
                    call.label, call.user = label, i
                    calls.append(call)
            return calls

        m = await measure(stack, t, f"{PART}-{name}-r{r + 1}", load)
        lows = [c for c in m.calls if c.label == "low"]
        bursts = [c for c in m.calls if c.label == "burst"]
        t_burst = m.t0 + found["burst_at"]
        figures = kind_figures(bursts, burst.objective, t_burst, 1.0, args.eviction_timeout)
        counted = dict.fromkeys(LOW_OUTCOMES, 0)
        for c in lows:
            counted[low_outcome(c)] += 1
        told = [outcomes_seen(c) for c in lows if c.status != CUT]
        result = {
            "kinds": {"burst": figures.as_dict()},
            "running_at_burst": found["running"],
            "burst_at_s": found["burst_at"],
            "low": counted,
            "low_told_once": sum(1 for n in told if n == 1),
            "low_told_other": sum(1 for n in told if n != 1),
            "preemptions": m.window.delta("vllm:num_preemptions_total", "engine"),
            "engine": engine_load(m),
            "cores": m.cores,
            "others_cores": round(m.window.others_cores, 3),
            **gateway_counts(m),
        }
        say(name, r, result, seqs)
        return result

    runs = await in_rounds(args.rounds, [t.name for t in targets], one, shift=3)
    return {"sequences": seqs, "burst": burst_size, "runs": runs}


def say(name: str, r: int, result: dict[str, Any], seqs: int) -> None:
    b = result["kinds"]["burst"]
    evictions = result.get("evictions")
    print(
        f"  eviction, round {r + 1}, {name:<22} running {result['running_at_burst']:.0f}/{seqs}"
        f" at the burst; burst met {b['met']}/{b['sent']} (p50 {num(b['ttft_p50'], 2)} s)"
        f"  low {result['low']}  evictions {evictions if evictions is not None else '-'}",
        flush=True,
    )
