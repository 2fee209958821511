"""A batch beside interactive load: what the Batch API takes from the users who wait.

On ``make up``'s engine (the tiny model on CPU 0, 24 KV blocks, priority
scheduling) and its gateway (pinned beside it, as ``make up`` sets it; a
fresh one for every run), in every round and each in its own run:

- *interactive alone*: ``--users`` chat users (class ``high``, short
  prompts, ``--max-tokens`` each, a think time between requests), closed
  loop for ``--seconds``;
- *batch alone*: one batch of ``--lines`` short completions through the
  Batch API (``/v1/files``, ``/v1/batches``), from its creation to
  ``completed``;
- *both*: the same interactive load and the same batch created at its start.

Read: the interactive TTFT p99 with the batch against without it (in the
same round), and within the class's objective; the batch's output tokens a
second while the interactive load ran beside it, against what the engine
had left for it (its rate alone less the interactive load's rate alone);
the batch's completion time alone and beside. Tokens from the gateway's
access log, by tenant (``batch`` and ``chat``), over the window the
interactive load ran.

    python -m benchmarks.batch_beside --rounds 5
"""

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

from benchmarks.classes.load import User, closed_loop
from benchmarks.classes.requests import body
from benchmarks.classes.stack import ClassesStack
from benchmarks.classes.targets import GATEWAY
from benchmarks.harness import (
    Call,
    Client,
    Processes,
    benchmark_parser,
    median_range,
    q,
    run_benchmark,
    table,
)
from benchmarks.harness.processes import access_log

SCENARIOS = ("interactive alone", "batch alone", "both")
TEXT = "the quick brown fox jumps over a lazy dog while seven patient clocks keep time"
WORDS = TEXT.split()


def prompt(i: int, words: int) -> str:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(words))


def batch_file(args: argparse.Namespace, model: str) -> bytes:
    lines = [
        {
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": "/v1/completions",
            "body": {
                "model": model,
                "prompt": prompt(i, 20),
                "max_tokens": args.batch_max_tokens,
                "ignore_eos": True,
            },
        }
        for i in range(args.lines)
    ]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


async def run_batch(url: str, data: bytes) -> tuple[float, float, str]:
    """Upload, create and poll to the end: (created at, ended at, status)."""
    headers = {"X-Tenant-Id": "batch"}
    async with AsyncOpenAI(base_url=f"{url}/v1", api_key="-", default_headers=headers) as client:
        uploaded = await client.files.create(file=("batch.jsonl", data), purpose="batch")
        created = time.perf_counter()
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/completions", completion_window="24h"
        )
        while batch.status not in ("completed", "failed", "expired", "cancelled"):
            await asyncio.sleep(0.5)
            batch = await client.batches.retrieve(batch.id)
    return created, time.perf_counter(), batch.status


async def run_interactive(
    stack: ClassesStack, args: argparse.Namespace, url: str, t0: float
) -> list[Call]:
    async with Client(url) as client:

        async def send() -> Call:
            messages = [{"role": "user", "content": prompt(int(time.time() * 1000), 12)}]
            headers = {"X-Tenant-Id": "chat", "X-Priority": "high"}
            return await client.stream(body(stack.model, messages, args.max_tokens), headers)

        users = [User("chat", send, args.think)] * args.users
        return await closed_loop(users, t0, args.seconds, args.seconds + 30)


def tokens_in(log: list[dict[str, Any]], tenant: str, start: float, end: float) -> int:
    """Output tokens of ``tenant``'s requests that ended within [start, end] (wall)."""
    return sum(
        e.get("completion_tokens") or 0
        for e in log
        if e.get("tenant") == tenant
        and e.get("outcome") == "completed"
        and start <= e["arrival_ts"] + e["total_s"] <= end
    )


async def one(
    stack: ClassesStack, args: argparse.Namespace, scenario: str, r: int
) -> dict[str, Any]:
    data = batch_file(args, stack.model)
    async with stack.serving(GATEWAY, f"{scenario.replace(' ', '-')}-r{r + 1}") as serving:
        wall0, t0 = time.time(), time.perf_counter()
        interactive = scenario != "batch alone"
        batch = scenario != "interactive alone"
        jobs: list[Any] = []
        if interactive:
            jobs.append(run_interactive(stack, args, serving.url, t0))
        if batch:
            jobs.append(run_batch(serving.url, data))
        done = await asyncio.gather(*jobs)
        assert serving.gateway is not None
        log = access_log(serving.gateway)
    calls: list[Call] = done[0] if interactive else []
    ttfts = [c.ttft for c in calls if c.ttft is not None and c.status == 200]
    window = args.seconds if interactive else None
    result: dict[str, Any] = {"round": r, "scenario": scenario}
    if interactive:
        result |= {
            "chat_requests": len(ttfts),
            "chat_failed": sum(1 for c in calls if c.status != 200),
            "chat_ttft_p50_s": q(ttfts, 0.5),
            "chat_ttft_p99_s": q(ttfts, 0.99),
            "chat_within_objective": sum(1 for t in ttfts if t <= args.objective),
            "chat_tokens_per_s": tokens_in(log, "chat", wall0, wall0 + args.seconds) / args.seconds,
        }
    if batch:
        created, ended, status = done[-1]
        # Over the window the chat load ran (or the batch's life, if shorter).
        span = min(window, ended - t0) if window else ended - t0
        result |= {
            "batch_status": status,
            "batch_seconds": ended - created,
            "batch_tokens_per_s": tokens_in(log, "batch", wall0, wall0 + span) / span,
        }
    return result


async def run(procs: Processes, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    args.gateway_env = [
        f"GATEWAY_BATCH_DIR={out / 'batches'}",
        f"GATEWAY_TTFT_OBJECTIVE_HIGH={args.objective}",
    ]
    args.eviction_kv_blocks, args.eviction_seqs = None, 16
    stack = ClassesStack(args, procs)
    stack.pin()
    runs = []
    try:
        await stack.engines_for({"priority"})
        for r in range(args.rounds):
            order = SCENARIOS[r % 3 :] + SCENARIOS[: r % 3]
            for scenario in order:
                runs.append(await one(stack, args, scenario, r))
                print(runs[-1], flush=True)
    finally:
        stack.stop()
    return {"runs": runs, "engine_cpus": stack.engine_cpus, "client_cpus": stack.client_cpus}


def render(result: dict[str, Any]) -> str:
    runs = result["runs"]
    by = {s: [r for r in runs if r["scenario"] == s] for s in SCENARIOS}
    rounds = sorted({r["round"] for r in runs})

    def cell(scenario: str, key: str, r: int) -> Any:
        found = [x for x in by[scenario] if x["round"] == r]
        return found[0].get(key) if found else None

    p99_ratio = [
        cell("both", "chat_ttft_p99_s", r) / cell("interactive alone", "chat_ttft_p99_s", r)
        for r in rounds
        if cell("both", "chat_ttft_p99_s", r) and cell("interactive alone", "chat_ttft_p99_s", r)
    ]
    left = [
        cell("both", "batch_tokens_per_s", r)
        / (
            cell("batch alone", "batch_tokens_per_s", r)
            - cell("interactive alone", "chat_tokens_per_s", r)
        )
        for r in rounds
        if cell("both", "batch_tokens_per_s", r) is not None
        and cell("batch alone", "batch_tokens_per_s", r)
        and cell("interactive alone", "chat_tokens_per_s", r) is not None
        and cell("batch alone", "batch_tokens_per_s", r)
        > cell("interactive alone", "chat_tokens_per_s", r)
    ]
    rows = []
    for s in SCENARIOS:
        mine = by[s]
        rows.append(
            [
                s,
                median_range([r.get("chat_ttft_p50_s") for r in mine], 3),
                median_range([r.get("chat_ttft_p99_s") for r in mine], 3),
                median_range(
                    [
                        r["chat_within_objective"] / r["chat_requests"]
                        for r in mine
                        if r.get("chat_requests")
                    ],
                    3,
                ),
                median_range([r.get("chat_tokens_per_s") for r in mine], 0),
                median_range([r.get("batch_tokens_per_s") for r in mine], 0),
                median_range([r.get("batch_seconds") for r in mine], 1),
                sum(r.get("chat_failed", 0) for r in mine),
            ]
        )
    headers = ["scenario", "chat TTFT p50 s", "chat TTFT p99 s", "chat within objective"]
    headers += ["chat tokens/s", "batch tokens/s", "batch completion s", "chat failed"]
    args = result["args"]
    return (
        f"Medians of {len(rounds)} rounds (min–max); {args['users']} chat users (class high,"
        f" objective {args['objective']:g} s), {args['seconds']:g} s; a batch of {args['lines']}"
        f" lines of {args['batch_max_tokens']} tokens.\n\n"
        + table(headers, rows)
        + f"\n\nChat TTFT p99 beside the batch ÷ alone, same round: {median_range(p99_ratio)}."
        f" The batch's tokens/s beside the chat load ÷ (the batch's alone − the chat's alone),"
        f" same round: {median_range(left)}.\n"
    )


def main() -> None:
    parser = benchmark_parser(__doc__ or "")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--think", type=float, default=0.5)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--objective", type=float, default=1.0, help="the chat class's, seconds")
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--batch-max-tokens", type=int, default=16)
    parser.add_argument("--kv-blocks", type=int, default=24)
    parser.add_argument("--max-num-seqs", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    run_benchmark("batch-beside", args, lambda procs, out: run(procs, out, args), render)


if __name__ == "__main__":
    main()
