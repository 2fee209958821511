"""What the fleet's shared state costs one Redis: N gateway replicas (1 to
128) over E engines (1 to 64), each admitting at a stated rate and
heart-beating every third of its lease.

For each fleet size, one process of simulated replicas
(``benchmarks/shared_state_replicas.py``: the gateway's own ``SharedRedis``
and ``FleetState``, so its real scripts) drives one real ``redis-server``:
every replica admits ``--rate`` requests a second on a random engine, holds
each ``--hold-seconds`` and releases it, publishes two waiting tenants and
heart-beats. Measured: each hold's round trip at the client (p50/p99), the
CPU Redis spent per admission (``INFO cpu``, everything the fleet asked of
it: holds, releases, heartbeats), and each script's own time in Redis
(``INFO commandstats`` and ``latencystats``: mean, p50, p99), timed alone on
the fleet's state right after the load. Redis runs one script at a time on
one core: 10⁶ ÷ its CPU µs per admission is the admissions a second one
Redis core serves, at that fleet size. No engine runs.

``--gateway-src DIR`` measures another source tree's scripts (e.g. a git
worktree of an earlier commit): the replicas import ``app`` from there.

``--cluster`` runs each fleet twice, on one ``redis-server`` and on a Redis
Cluster of three primaries (each with a replica), side by side: Redis's CPU
per admission summed over the primaries and on the busiest shard (``{gw}``'s,
which every admission's TURN reaches, or one serving engines), whose µs per
admission bound what the cluster serves.

    make bench-shared-state
    python -m benchmarks.shared_state --replicas 1,8,32,128 --engines 1,8,64 --seconds 10
    python -m benchmarks.shared_state --cluster --replicas 8,32,128 --engines 8,64
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import Processes, benchmark_parser, run_benchmark, table
from benchmarks.shared_state_replicas import RUN_BY_PATH

REPLICAS_SCRIPT = Path(__file__).with_name("shared_state_replicas.py")


def fleet_options(
    args: Any, url: str, replicas: int, engines: int, cluster: bool = False
) -> dict[str, Any]:
    return {
        "url": url,
        "cluster": cluster,
        "replicas": replicas,
        "engines": engines,
        "rate": args.rate,
        "lease": args.lease,
        "hold_seconds": args.hold_seconds,
        "tenants": args.tenants,
        "tokens": args.tokens,
        "warmup": args.warmup,
        "seconds": args.seconds,
        "isolated_holds": args.isolated_holds,
        "idle_seconds": args.idle_seconds,
    }


def one_fleet(src: str, options: dict[str, Any], log: Path | None = None) -> dict[str, Any]:
    """One fleet's run, in a process of its own that imports ``app`` from
    ``src``; its result."""
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    argv = [sys.executable, "-c", RUN_BY_PATH, str(REPLICAS_SCRIPT), json.dumps(options)]
    done = subprocess.run(
        argv, cwd=src, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    if log is not None:
        log.write_text(done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"the simulated replicas failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


# The key of a cluster shard's CPU µs per admission.
CPU = "cpu_usec_per_admission"


def render(result: dict[str, Any]) -> str:
    fleets = result["fleets"]
    # With --cluster: which Redis each row ran on, and the busiest shard.
    clustered = any("redis" in f for f in fleets)
    rows = []
    for f in fleets:
        busiest = f.get("busiest_shard")
        limit = f["server_cpu_usec_per_admission"] if busiest is None else busiest[CPU]
        row = [
            str(f["replicas"]),
            str(f["engines"]),
            f"{f['admissions_per_s']:,.0f} ({f['offered_per_s']:,})",
            f"{_f(f['hold_rtt_p50_ms'], 2)} / {_f(f['hold_rtt_p99_ms'], 2)}",
            f"{_f(f['ping_rtt_p50_ms'], 2)} / {_f(f['ping_rtt_p99_ms'], 2)}",
            f"{_f(f['hold_alone']['usec_per_call'])} / {_f(f['hold_alone']['p50_usec'])}"
            f" / {_f(f['hold_alone']['p99_usec'])}",
            _f(f["heartbeat_alone"]["usec_per_call"]),
            _f(f["server_cpu_usec_per_admission"]),
            f"{1e6 / max(limit, 1e-9):,.0f}",
            f"{f['server_cpu_share']:.2f} / {f['load_cpu_share']:.2f}",
        ]
        if clustered:
            row.insert(2, f.get("redis", ""))
            row.insert(9, "-" if busiest is None else f"{busiest[CPU]:,.1f} ({busiest['serves']})")
        rows.append(row)
    head = [
        "live replicas",
        "engines",
        "admissions/s (offered)",
        "HOLD round trip under load (one replica), p50 / p99 ms",
        "PING round trip, same replica, p50 / p99 ms",
        "HOLD in Redis, mean / p50 / p99 µs",
        "heartbeat in Redis, µs",
        "Redis CPU µs per admission",
        "admissions/s one Redis core",
        "cores busy: Redis / the other replicas' process",
    ]
    if clustered:
        head.insert(2, "Redis")
        head.insert(9, "busiest shard: CPU µs per admission (what it serves)")
        head[10] = "admissions/s one Redis core (cluster: its busiest shard's)"
    args = result["args"]
    text = (
        f"Each replica admitting {args['rate']:g} requests a second (Poisson), holding each"
        f" {args['hold_seconds']:g} s, heart-beating every {args['lease'] / 3:.2f} s (lease"
        f" {args['lease']:g} s), two tenants waiting at each; {args['seconds']:g} s measured per"
        " fleet. Round trip: at one replica in a process of its own (the others share one),"
        " under that load; beside it, that replica's PINGs at the same rate on a connection of"
        " their own (what the machine and the client take for a command that does nothing)."
        " In Redis: INFO commandstats and latencystats, each script timed alone on the fleet's"
        " state right after the load."
        " Redis CPU: INFO cpu over the window, net of Redis idle, ÷ admissions (holds, releases"
        " and heartbeats included); one core: 10⁶ ÷ that.\n\n" + table(head, rows) + "\n"
    )
    if clustered:
        text += "\n" + render_shards(fleets)
    return text


def render_shards(fleets: list[dict[str, Any]]) -> str:
    """The cluster's rows, one per primary."""
    rows = []
    for f in fleets:
        scripts = zip(
            f.get("shards", []),
            f["scripts_under_load"].get("primaries", []),
            f["hold_alone"].get("primaries", []),
            f["heartbeat_alone"].get("primaries", []),
            strict=True,
        )
        for shard, load, hold, beat in scripts:
            rows.append(
                [
                    str(f["replicas"]),
                    str(f["engines"]),
                    f"{shard['node']} ({shard['serves']})",
                    _f(shard[CPU]),
                    f"{shard['cpu_share']:.2f}",
                    f"{load['calls']:,} / {_f(load['usec_per_call'])}",
                    f"{hold['calls']:,} / {_f(hold['usec'] / max(1, f['hold_alone']['per']))}",
                    f"{beat['calls']:,} / {_f(beat['usec'] / max(1, f['heartbeat_alone']['per']))}",
                ]
            )
    head = [
        "live replicas",
        "engines",
        "primary (what it serves)",
        "Redis CPU µs per admission",
        "cores busy",
        "EVALSHA under load: calls / µs per call",
        "holds alone: EVALSHA calls / µs per hold",
        "heartbeats alone: EVALSHA calls / µs per beat",
    ]
    return (
        "Redis Cluster (`redis-cli --cluster create`, three primaries each with a replica, on"
        " this machine): an admission is TURN on `{gw}`'s shard, then PLACE on its engine's;"
        " a heartbeat FLEET_BEAT on `{gw}`'s and one ENGINE_BEAT per engine. Above, on the"
        " cluster: Redis CPU summed over the primaries (their replicas not counted); one core:"
        " 10⁶ ÷ the busiest shard's µs per admission (each shard runs its scripts on a core of"
        " its own: the busiest bounds the cluster); HOLD in Redis: every primary's EVALSHA µs"
        " during the holds timed alone ÷ holds (TURN + PLACE; no percentiles, they do not add"
        " across shards), heartbeat likewise ÷ beats. Per primary:\n\n" + table(head, rows) + "\n"
    )


def main() -> None:
    p = benchmark_parser(__doc__ or "")
    p.add_argument("--replicas", default="1,8,32,128", help="fleet sizes, comma-separated")
    p.add_argument("--engines", default="1,8,64", help="engine counts, comma-separated")
    p.add_argument("--rate", type=float, default=50.0, help="admissions a second per replica")
    p.add_argument("--lease", type=float, default=5.0, help="GATEWAY_REDIS_LEASE_SECONDS")
    p.add_argument("--hold-seconds", type=float, default=2.0, help="how long a request holds")
    p.add_argument("--tenants", type=int, default=16, help="tenants admitted, fleet-wide")
    p.add_argument("--tokens", type=int, default=1000, help="tokens charged per admission")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds measured per fleet")
    p.add_argument("--isolated-holds", type=int, default=400, help="holds timed alone")
    p.add_argument("--idle-seconds", type=float, default=2.0, help="Redis idle, measured")
    p.add_argument(
        "--cluster",
        action="store_true",
        help="each fleet also on a Redis Cluster of 3 primaries (each with a replica)",
    )
    args = p.parse_args()
    sizes = [int(x) for x in args.replicas.split(",") if x]
    engine_counts = [int(x) for x in args.engines.split(",") if x]

    async def run(procs: Processes, out: Path) -> dict[str, Any]:
        # (what the table calls it, its URL, a cluster's): one, or both.
        servers = [("1 node", procs.redis(), False)]
        if args.cluster:
            servers.append(("cluster, 3 primaries", procs.redis_cluster(), True))
        fleets = []
        for engines in engine_counts:
            for replicas in sizes:
                for label, url, cluster in servers:
                    options = fleet_options(args, url, replicas, engines, cluster)
                    name = f"replicas-{replicas}-engines-{engines}{'-cluster' if cluster else ''}"
                    fleet = one_fleet(args.gateway_src, options, out / "logs" / f"{name}.log")
                    if args.cluster:
                        fleet["redis"] = label
                    fleets.append(fleet)
                    print(
                        f"  {replicas:>4} replicas, {engines:>3} engines"
                        f"{f', {label}' if args.cluster else ''}:"
                        f" {fleet['admissions_per_s']:,.0f} admissions/s, hold round trip p99"
                        f" {_f(fleet['hold_rtt_p99_ms'], 2)} ms, HOLD in Redis"
                        f" {fleet['hold_alone']['usec_per_call']:.1f} µs,"
                        f" {fleet['server_cpu_usec_per_admission']:.1f} Redis CPU µs per"
                        " admission",
                        flush=True,
                    )
        return {"fleets": fleets}

    run_benchmark("shared-state", args, run, render)


if __name__ == "__main__":
    main()
