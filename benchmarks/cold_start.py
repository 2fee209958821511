"""A real cold start: the first request through the gateway to an engine that is not running.

The gateway as ``make up ENGINE_SCALE_FROM_ZERO`` runs it: the engine's model
configured cold (``GATEWAY_COLD_MODELS``), requests held up to
``GATEWAY_COLD_START_TIMEOUT``, and the local scaler (``deploy/scaler.py``)
beside it, which starts the engine (``deploy/engine/run-cpu.sh``, CPU
build, tiny model) on the first held request and stops it after
``--idle`` seconds. One streamed request is sent with no engine running;
its time to first token is the cold start a user sees.

The anchor, in the same rounds: the same engine started by hand (what an
operator without the gateway's hold does: start it, poll ``/health``,
send the request once it answers), from the launch to the first token.
The difference is what the hold adds: the scaler's polling, the gateway's
health check finding the engine up, the request's admission.

Also per round: the gateway's own measure of the start
(``gateway_cold_start_seconds``), and the seconds from the request's end
to the scaler's stop of the idle engine (its group gone).

    python -m benchmarks.cold_start --rounds 3
"""

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness import (
    Client,
    Processes,
    benchmark_parser,
    median_range,
    run_benchmark,
    table,
)
from benchmarks.harness.processes import Service, model_name
from deploy.local import ROOT, ManagedProcess, free_port, metric

MAX_MODEL_LEN = 2048
BODY = {"prompt": "Once upon a time", "max_tokens": 16, "ignore_eos": True}


async def first_request(url: str) -> tuple[float | None, int]:
    """One streamed request; its TTFT from now, and its status."""
    async with Client(url) as client:
        started = time.perf_counter()
        call = await client.stream({"model": model_name(), **BODY}, path="/v1/completions")
    first = None if call.first_token is None else call.first_token - started
    return first, call.status


async def wait_health(url: str, proc: ManagedProcess, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=2) as http:
        while time.monotonic() < deadline:
            if proc.proc.poll() is not None:
                raise RuntimeError(f"{proc.name} exited:\n{proc.log_tail()}")
            try:
                if (await http.get(f"{url}/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)
    raise TimeoutError(f"{url} not up after {timeout}s")


async def by_hand(procs: Processes, r: int) -> dict[str, Any]:
    """The anchor: launch, poll /health every 100 ms, then the request."""
    started = time.perf_counter()
    engine = procs.engine(f"engine-by-hand-{r}")
    await wait_health(engine.url, engine.proc)
    up = time.perf_counter() - started
    ttft, status = await first_request(engine.url)
    procs.stop(engine)
    return {
        "first_token_s": None if ttft is None else up + ttft,
        "engine_up_s": up,
        "status": status,
    }


async def through_gateway(procs: Processes, r: int, args: argparse.Namespace) -> dict[str, Any]:
    port, admin = free_port(), free_port()
    engine_url = f"http://127.0.0.1:{port}"
    gateway = procs.gateway(
        f"gateway-{r}",
        {
            "GATEWAY_UPSTREAM_URL": engine_url,
            "GATEWAY_ADMIN_PORT": str(admin),
            "GATEWAY_COLD_MODELS": f"{model_name()}={MAX_MODEL_LEN}",
            "GATEWAY_COLD_START_TIMEOUT": "300",
            "GATEWAY_TOKENIZER_DIR": str(ROOT / ".models/tiny"),
        },
        Path(args.gateway_src),
    )
    admin_url = f"http://127.0.0.1:{admin}"
    await asyncio.to_thread(gateway.proc.wait_http, f"{gateway.url}/health/live", 60)
    scaler_argv = [sys.executable, "-m", "deploy.scaler", "--metrics", admin_url]
    scaler_argv += ["--idle", str(args.idle), "--interval", "0.5", "--"]
    scaler_argv += ["deploy/engine/run-cpu.sh"]
    env = {"ENGINE_PORT": str(port), "ENGINE_KV_BLOCKS": "", "ENGINE_MAX_NUM_SEQS": ""}
    scaler = procs.command(f"scaler-{r}", scaler_argv, {**env, "VLLM_CPU_KVCACHE_SPACE": "1"})
    ttft, status = await first_request(gateway.url)
    ended = time.perf_counter()
    measured = metric(admin_url, "gateway_cold_start_seconds_sum", model=model_name())
    # The scaler stops the engine once idle: its log says so.
    while "engine stopped" not in scaler.log_text():
        if time.perf_counter() - ended > args.idle + 120:
            raise TimeoutError("the scaler did not stop the idle engine")
        await asyncio.sleep(0.5)
    stopped = time.perf_counter() - ended
    procs.stop(Service(f"scaler-{r}", "", scaler))
    procs.stop(gateway)
    return {
        "first_token_s": ttft,
        "gateway_measured_start_s": measured,
        "stopped_after_idle_s": stopped,
        "status": status,
    }


async def run(procs: Processes, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    for r in range(args.rounds):
        # Each round in the other order: neither start always comes first.
        order = ("by hand", "gateway") if r % 2 == 0 else ("gateway", "by hand")
        for target in order:
            result = await (
                by_hand(procs, r) if target == "by hand" else through_gateway(procs, r, args)
            )
            runs.append({"round": r, "target": target, **result})
            print(runs[-1], flush=True)
    return {"runs": runs, "cpus": len(os.sched_getaffinity(0))}


def render(result: dict[str, Any]) -> str:
    runs = result["runs"]
    hand = [r for r in runs if r["target"] == "by hand"]
    gate = [r for r in runs if r["target"] == "gateway"]
    pairs = [
        g["first_token_s"] / h["first_token_s"]
        for g, h in zip(gate, hand, strict=True)
        if g["first_token_s"] and h["first_token_s"]
    ]
    rows = [
        [
            "engine started by hand, /health polled",
            median_range([r["first_token_s"] for r in hand if r["first_token_s"]], 1),
            "1",
            "-",
            "-",
        ],
        [
            "through the gateway, the scaler starting it",
            median_range([r["first_token_s"] for r in gate if r["first_token_s"]], 1),
            median_range(pairs, 2),
            median_range([r["gateway_measured_start_s"] for r in gate], 1),
            median_range([r["stopped_after_idle_s"] for r in gate], 1),
        ],
    ]
    headers = [
        "first request, no engine running",
        "launch to first token s",
        "÷ by hand (same round)",
        "gateway's cold-start s",
        "request end to engine stopped s",
    ]
    failed = sum(1 for r in runs if r["status"] != 200)
    rounds = result["args"]["rounds"]
    idle = result["args"]["idle"]
    return (
        f"Medians of {rounds} rounds (min–max); the scaler's idle time {idle:g} s;"
        f" requests not answered 200: {failed}.\n\n" + table(headers, rows) + "\n"
    )


def main() -> None:
    parser = benchmark_parser(__doc__ or "")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=float, default=10.0, help="the scaler's idle seconds")
    args = parser.parse_args()
    run_benchmark("cold-start", args, lambda procs, out: run(procs, out, args), render)


if __name__ == "__main__":
    main()
