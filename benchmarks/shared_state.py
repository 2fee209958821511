"""What the fleet's shared state costs Redis: the admission script (HOLD,
``app/state/scripts.py``) at 2 to 128 live replicas.

Every admission of every replica runs HOLD once; it reads what every live
replica holds on the engine and which tenants wait at each, so its cost
grows with the fleet. For each fleet size this starts that many replicas'
worth of shared state against one real ``redis-server`` (the gateway's own
``SharedRedis``/``FleetState``, each replica with its lease, its holdings and
two tenants waiting in its queue), then admits and releases as fast as
``--clients`` concurrent callers can for ``--seconds``, and reads from Redis
itself (``INFO commandstats``, ``INFO cpu``) what each HOLD cost the server.
No engine runs. Redis runs one script at a time on one core: the server
microseconds per call bound the admissions one Redis serves a second.

    make bench-shared-state
    python -m benchmarks.shared_state --replicas 2,8,32,128 --seconds 5
"""

import asyncio
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from app.state import scripts
from app.state.fleet import FleetState
from app.state.redis import SharedRedis
from benchmarks.harness import Processes, benchmark_parser, run_benchmark, table

ENGINE = "http://engine-0:8000"
# Generous: the fleet's holdings never fill it, so every HOLD that is the
# fleet's turn is held (and released at once): the script's full path.
BUDGET, CAP = 10**9, 10**9
PRIORITY = "normal"


async def one_fleet(url: str, replicas: int, clients: int, seconds: float) -> dict[str, Any]:
    control = aioredis.Redis.from_url(url)
    await control.flushall()
    fleet = [SharedRedis(url, lease=600.0, timeout=5.0) for _ in range(replicas)]
    states = [FleetState(shared) for shared in fleet]
    for i, (shared, state) in enumerate(zip(fleet, states, strict=True)):
        shared.up = True
        await state.heartbeat({ENGINE: (i % 3, i % 2, i % 2)})
        # Two tenants waiting at each replica, none earlier than the ones
        # admitted below (their clocks start at 0 and are charged nothing).
        await shared.client.hset(
            shared.key("waiting", PRIORITY), shared.replica, f"idle-{i}-a\nidle-{i}-b"
        )
    # Loaded before the count starts: a first EVALSHA of an unknown script
    # fails, and redis-py loads it and calls again (two calls for one hold).
    await control.script_load(scripts.HOLD)
    await control.config_resetstat()
    cpu_before = await _server_cpu(control)
    deadline = time.monotonic() + seconds
    admitted = refused = 0

    async def caller(n: int) -> None:
        nonlocal admitted, refused
        state = states[n % replicas]
        while time.monotonic() < deadline:
            held = await state.hold(ENGINE, (4, 1, 1), (BUDGET, CAP), (PRIORITY, f"t{n}", 0))
            if held.ok:
                admitted += 1
                await state._shared.client.hincrby(
                    state._shared.key("requests", ENGINE), state._shared.replica, -1
                )
            else:
                refused += 1

    started = time.monotonic()
    await asyncio.gather(*(caller(n) for n in range(clients)))
    elapsed = time.monotonic() - started
    cpu = await _server_cpu(control) - cpu_before
    stats = await control.info("commandstats")
    evalsha = stats.get("cmdstat_evalsha", {})
    for shared in fleet:
        await shared.aclose()
    await control.aclose()
    calls = int(evalsha.get("calls", 0))
    return {
        "replicas": replicas,
        "clients": clients,
        "holds": admitted + refused,
        "admitted": admitted,
        "refused": refused,
        "holds_per_s": (admitted + refused) / elapsed,
        "hold_usec_per_call": float(evalsha.get("usec_per_call", 0.0)),
        "hold_calls": calls,
        "server_cpu_s": cpu,
        "server_cpu_usec_per_hold": cpu / max(1, admitted + refused) * 1e6,
        "max_holds_per_s_one_core": 1e6 / float(evalsha.get("usec_per_call") or 1.0),
    }


async def _server_cpu(client: aioredis.Redis) -> float:
    info = await client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def render(result: dict[str, Any]) -> str:
    rows = [
        [
            str(r["replicas"]),
            f"{r['holds']:,}",
            f"{r['holds_per_s']:,.0f}",
            f"{r['hold_usec_per_call']:.1f}",
            f"{r['server_cpu_usec_per_hold']:.1f}",
            f"{r['max_holds_per_s_one_core']:,.0f}",
        ]
        for r in result["fleets"]
    ]
    head = [
        "live replicas",
        "holds",
        "holds/s measured",
        "HOLD server µs/call",
        "Redis CPU µs/hold",
        "holds/s one Redis core (1e6 ÷ µs/call)",
    ]
    clients = result["fleets"][0]["clients"] if result["fleets"] else 0
    return (
        f"HOLD against one redis-server, {clients} concurrent callers, every replica with a lease,"
        " holdings and two tenants waiting; no engine.\n\n" + table(head, rows)
    )


def main() -> None:
    p = benchmark_parser(__doc__ or "")
    p.add_argument("--replicas", default="2,8,32,128")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=5.0)
    args = p.parse_args()
    sizes = [int(x) for x in args.replicas.split(",") if x]

    async def run(procs: Processes, out: Path) -> dict[str, Any]:
        url = procs.redis()
        fleets = [await one_fleet(url, n, args.clients, args.seconds) for n in sizes]
        for f in fleets:
            print(
                f"  {f['replicas']:>4} replicas: {f['holds_per_s']:,.0f} holds/s,"
                f" {f['hold_usec_per_call']:.1f} µs/call in Redis",
                flush=True,
            )
        return {"fleets": fleets}

    run_benchmark("shared-state", args, run, render)


if __name__ == "__main__":
    main()
