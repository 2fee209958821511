"""Simulated gateway replicas for the shared-state benchmark
(``benchmarks.shared_state``): what a replica's dispatcher and writer do to
Redis, without engines or HTTP.

Each replica is the gateway's own ``SharedRedis`` and ``FleetState`` (its
connection, its writer task, its heartbeat every third of the lease, its
scripts), admitting at ``rate`` a second (Poisson arrivals, one hold at a
time, as the dispatcher holds them) on one of ``engines`` engines at random,
keeping each admission ``hold_seconds`` and then releasing it through the
writer, as a finished request does. Two tenants wait at every replica the
whole time (published, and passed as the queue's other tenants on every
hold) with clocks far ahead, so every hold is the fleet's turn and runs the
whole fair-order check; budgets are generous, so every hold is held.

Run in its own process with the measured gateway tree on ``PYTHONPATH`` (the
benchmark's ``--gateway-src``): it imports nothing from ``benchmarks``, takes
its options as JSON (argv[1]) and prints its result as JSON. One replica,
the probe, runs in a process of its own, as a real replica would: its round
trips are Redis's answer time plus one replica's client, not the wait for
the others' work on a shared event loop. The other N − 1 run in this one.

Measured, for one fleet: Redis's CPU with the fleet connected and idle;
during ``seconds`` of that load, each hold's round trip (client side), and
from Redis itself (``INFO``) the CPU it spent (net of idle), its commands'
statistics and latency percentiles; then, with the load stopped and the
fleet's state left as it was, every replica's heartbeat and the probe's
holds one at a time, so that ``INFO commandstats`` and ``latencystats``
show each script's own time (under load every script is one ``EVALSHA`` in
those statistics).

With ``cluster`` the URL is one node of a Redis Cluster: each replica's
client is the gateway's cluster client (an admission is then TURN on
``{gw}``'s shard and PLACE on its engine's), and everything read from
``INFO`` is read on every primary, summed, and kept per shard too.
"""

import asyncio
import json
import os
import random
import sys
import time
from collections import deque
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

import redis.asyncio as aioredis
import uvloop

from app.state.fleet import FleetState, Holding
from app.state.redis import SharedRedis

# Generous: the fleet's holdings never fill them, so every hold that is the
# fleet's turn is held: the script's whole path.
BUDGET, CAP = 10**9, 10**9
PRIORITY = "normal"
WANT: Holding = (4, 1, 1)
# The clocks of the tenants that wait: far ahead of anything admitted.
WAITING_CLOCK = 10**12
# Runs a file by its path, so that ``app`` is imported from PYTHONPATH (the
# measured tree) and nothing from this tree's ``benchmarks``.
THIS_FILE = os.path.abspath(__file__)
RUN_BY_PATH = (
    "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def quantile(values: Sequence[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


class Replica:
    def __init__(self, n: int, url: str, engines: list[str], opts: dict[str, Any]) -> None:
        self.shared = SharedRedis(address(url, opts), lease=opts["lease"], timeout=10.0)
        self.fleet = FleetState(self.shared)
        self.engines = engines
        self.rate = opts["rate"]
        self.hold_seconds = opts["hold_seconds"]
        self.tenants = [f"t{i}" for i in range(opts["tenants"])]
        self.tokens = opts["tokens"]
        self.waiting = [f"waiting-{n}-a", f"waiting-{n}-b"]
        self.holdings: dict[str, Holding] = {e: (0, 0, 0) for e in engines}
        # As ``SharedBudgets``: no heartbeat while a hold is out.
        self.lock = asyncio.Lock()
        self.releases: deque[tuple[float, str]] = deque()
        self.rtts: list[float] = []
        self.held = self.refused = 0
        self.stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self.shared.on_heartbeat(self.beat)

    def _add(self, engine: str, sign: int) -> None:
        held = self.holdings[engine]
        self.holdings[engine] = (
            held[0] + sign * WANT[0],
            held[1] + sign * WANT[1],
            held[2] + sign * WANT[2],
        )

    async def beat(self) -> None:
        """What ``SharedBudgets.beat`` asks of Redis: write what this
        replica holds on every engine, read the queued tenants' clocks."""
        async with self.lock:
            await self.fleet.heartbeat(dict(self.holdings))
        await self.fleet.clocks({PRIORITY: self.waiting})

    async def setup(self) -> None:
        """Join the fleet, put the waiting tenants' clocks far ahead (one
        hold each, given back) and publish them as waiting here."""
        await self.shared.heartbeat()
        engine = self.engines[0]
        for tenant in self.waiting:
            held = await self.fleet.hold(
                engine, (0, 0, 1), (BUDGET, CAP), (PRIORITY, tenant, WAITING_CLOCK)
            )
            assert held.ok, held
            self.fleet.release(engine, (0, 0, 1))
        self.fleet.publish_waiting({PRIORITY: self.waiting})

    async def hold_one(self) -> None:
        engine = random.choice(self.engines)
        tenant = (PRIORITY, random.choice(self.tenants), self.tokens)
        async with self.lock:
            started = time.perf_counter()
            held = await self.fleet.hold(engine, WANT, (BUDGET, CAP), tenant, self.waiting)
            self.rtts.append(time.perf_counter() - started)
            if held.ok:
                self._add(engine, 1)
        if held.ok:
            self.held += 1
            self.releases.append((time.monotonic() + self.hold_seconds, engine))
        else:
            self.refused += 1

    def release_due(self, now: float) -> None:
        while self.releases and self.releases[0][0] <= now:
            _, engine = self.releases.popleft()
            self._add(engine, -1)
            self.fleet.release(engine, WANT)

    async def admit(self) -> None:
        """Arrivals at ``rate`` a second, held one at a time: a replica
        that falls behind admits back to back (its rate then shows it)."""
        loop = asyncio.get_running_loop()
        next_at = loop.time() + random.expovariate(self.rate)
        while not self.stopping:
            delay = next_at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self.release_due(time.monotonic())
            await self.hold_one()
            next_at += random.expovariate(self.rate)

    def start(self, interval: float) -> None:
        """Admit, and run the writer (releases, heartbeats) as the gateway
        does, its heartbeats at a random phase, as independent replicas'."""

        async def writer() -> None:
            await asyncio.sleep(random.uniform(0, interval))
            await self.shared.run()

        self._tasks = [asyncio.create_task(writer()), asyncio.create_task(self.admit())]

    def measure(self) -> None:
        self.rtts.clear()
        self.held = self.refused = 0

    async def stop(self) -> None:
        """Stop admitting, then the writer; the state in Redis stays."""
        self.stopping = True
        writer, admitter = self._tasks
        await admitter
        writer.cancel()
        with suppress(asyncio.CancelledError):
            await writer

    def summary(self) -> dict[str, Any]:
        return {"held": self.held, "refused": self.refused, "rtts": self.rtts}


def address(url: str, opts: dict[str, Any]) -> Any:
    """Where the replicas' state is: one Redis, or a cluster found from one
    of its nodes (imported only then: an earlier tree has no cluster)."""
    if not opts.get("cluster"):
        return url
    from app.state.address import ClusterAddress

    return ClusterAddress(url)


async def server_cpu(control: aioredis.Redis) -> float:
    info = await control.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def script_stats(control: aioredis.Redis, usec: bool = False) -> dict[str, Any]:
    """``EVALSHA``'s calls and µs per call, and its latency percentiles (µs),
    as Redis counts them since the last ``CONFIG RESETSTAT``; ``usec``: and
    its total µs (to sum a cluster's primaries with)."""
    stats = (await control.info("commandstats")).get("cmdstat_evalsha", {})
    latency = (await control.info("latencystats")).get("latency_percentiles_usec_evalsha", {})
    out = {
        "calls": int(stats.get("calls", 0)),
        "usec_per_call": float(stats.get("usec_per_call", 0.0)),
        "p50_usec": float(latency.get("p50", 0.0)),
        "p99_usec": float(latency.get("p99", 0.0)),
    }
    if usec:
        out["usec"] = int(stats.get("usec", 0))
    return out


class Servers:
    """The Redis servers the fleet's state is on, a plain client each: the
    one Redis, or a cluster's primaries (where each script runs; replicas
    only copy) with the slots each serves."""

    def __init__(self, urls: list[str], serves: list[str] | None = None) -> None:
        self.clients = [aioredis.Redis.from_url(u) for u in urls]
        self.nodes = [u.removeprefix("redis://") for u in urls]
        self.serves = serves

    @classmethod
    async def find(cls, url: str, engines: list[str], cluster: bool) -> "Servers":
        """On a cluster: its primaries as the seed's ``CLUSTER SLOTS`` has
        them, and what each serves: ``{gw}`` (every admission's TURN) and
        how many of the engines (their PLACEs)."""
        if not cluster:
            return cls([url])
        from app.state import layout

        async with aioredis.Redis.from_url(url) as seed:
            ranges = await seed.cluster("slots")
            keys = [layout.FLEET] + [layout.engine(e)[0] for e in engines]
            slots = [int(await seed.cluster("keyslot", k)) for k in keys]
        owner: dict[str, list[int]] = {}
        for start, end, (host, port, *_), *_replicas in ranges:
            node = owner.setdefault(f"redis://{host.decode()}:{port}", [0, 0])
            node[0] += start <= slots[0] <= end
            node[1] += sum(start <= s <= end for s in slots[1:])
        serves = [
            ", ".join([*(["{gw}"] if gw else []), f"{n} of {len(engines)} engines"])
            for gw, n in owner.values()
        ]
        return cls(list(owner), serves)

    async def flushall(self) -> None:
        for client in self.clients:
            await client.flushall()

    async def resetstat(self) -> None:
        for client in self.clients:
            await client.config_resetstat()

    async def cpu(self) -> list[float]:
        return [await server_cpu(c) for c in self.clients]

    async def scripts(self, per: int | None = None) -> dict[str, Any]:
        """``script_stats`` of the one Redis; of a cluster, summed over its
        primaries (each kept under ``primaries``): µs per ``EVALSHA``, or,
        given ``per`` (holds, beats), per one of those — every script each
        ran, on whichever shard. Percentiles do not add up across shards:
        none then."""
        if self.serves is None:
            return await script_stats(self.clients[0])
        each = [await script_stats(c, usec=True) for c in self.clients]
        calls, usec = sum(s["calls"] for s in each), sum(s["usec"] for s in each)
        return {
            "calls": calls,
            # What the µs are divided by: EVALSHAs, or holds, or beats.
            "per": calls if per is None else per,
            "usec_per_call": usec / max(1, calls if per is None else per),
            "p50_usec": None,
            "p99_usec": None,
            "primaries": [
                {"node": n, "serves": v, **s}
                for n, v, s in zip(self.nodes, self.serves, each, strict=True)
            ],
        }

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()


class Pinger:
    """PINGs at ``rate`` a second (Poisson) from ``start`` to ``stop``, each
    one's round trip kept.

    Stopped by a flag, not by cancelling its task: on Python 3.11 redis-py
    sends a command through ``asyncio.wait_for``, which returns the result
    and drops the cancellation when it lands as the send completes (about
    one cancellation in fifty, here); a loop cancelled then PINGs on
    forever, and so would the benchmark."""

    def __init__(self, client: Any, rate: float) -> None:
        self.client = client
        self.rate = rate
        self.rtts: list[float] = []
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while not self._stopping:
            await asyncio.sleep(random.expovariate(self.rate))
            started = time.perf_counter()
            await self.client.ping()
            self.rtts.append(time.perf_counter() - started)


class Probe:
    """The probe replica's process, seen from the load's: one command a
    line on its stdin, one JSON answer a line on its stdout."""

    def __init__(self, opts: dict[str, Any]) -> None:
        self.opts = {**opts, "role": "probe"}

    async def start(self) -> None:
        argv = [sys.executable, "-c", RUN_BY_PATH, THIS_FILE]
        self.proc = await asyncio.create_subprocess_exec(
            *argv,
            json.dumps(self.opts),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        await self.ask("")  # ready

    async def ask(self, command: str) -> Any:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        if command:
            self.proc.stdin.write(command.encode() + b"\n")
            await self.proc.stdin.drain()
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the probe replica exited")
        return json.loads(line)

    async def close(self) -> None:
        await self.ask("quit")
        await self.proc.wait()


async def probe_main(url: str, opts: dict[str, Any]) -> None:
    """The probe replica: set up, say so, then do as told."""
    engines = [f"http://engine-{e}:8000" for e in range(opts["engines"])]
    replica = Replica(0, url, engines, opts)
    await replica.setup()

    def answer(value: Any) -> None:
        print(json.dumps(value), flush=True)

    # PINGs at the same rate, on a connection of their own: the round trip
    # of a command that does nothing, at the same moments — the machine's
    # and the client's part of a hold's round trip.
    pinger = Pinger(aioredis.Redis.from_url(url), opts["rate"])

    answer({})
    while True:
        command, *rest = (await asyncio.to_thread(sys.stdin.readline)).split()
        if command == "start":
            replica.start(opts["lease"] / 3)
            pinger.start()
        elif command == "measure":
            replica.measure()
            pinger.rtts.clear()
        elif command == "stop":
            await replica.stop()
            await pinger.stop()
        elif command == "summary":
            answer({**replica.summary(), "pings": pinger.rtts})
            continue
        elif command == "beat":
            await replica.beat()
        elif command == "holds":
            replica.measure()
            for _ in range(int(rest[0])):
                await replica.hold_one()
            answer(replica.summary())
            continue
        elif command == "quit":
            await replica.shared.aclose()
            await pinger.client.aclose()
            answer({})
            return
        answer({})


async def run_fleet(url: str, opts: dict[str, Any]) -> dict[str, Any]:
    engines = [f"http://engine-{e}:8000" for e in range(opts["engines"])]
    servers = await Servers.find(url, engines, bool(opts.get("cluster")))
    await servers.flushall()
    replicas = [Replica(n, url, engines, opts) for n in range(1, opts["replicas"])]
    for replica in replicas:
        await replica.setup()
    probe = Probe(opts)
    await probe.start()
    # What Redis spends with the fleet connected and nothing asked of it
    # (its own timers): not the admissions' cost.
    idle_before = await servers.cpu()
    await asyncio.sleep(opts["idle_seconds"])
    idles = [
        (b - a) / opts["idle_seconds"]
        for a, b in zip(idle_before, await servers.cpu(), strict=True)
    ]

    for replica in replicas:
        replica.start(opts["lease"] / 3)
    await probe.ask("start")
    await asyncio.sleep(opts["warmup"])

    # The measured window.
    for replica in replicas:
        replica.measure()
    await probe.ask("measure")
    await servers.resetstat()
    cpu_before, client_before = await servers.cpu(), time.process_time()
    started = time.monotonic()
    await asyncio.sleep(opts["seconds"])
    elapsed = time.monotonic() - started
    cpus = [b - a for a, b in zip(cpu_before, await servers.cpu(), strict=True)]
    client_cpu = time.process_time() - client_before
    under_load = await servers.scripts()
    probed = await probe.ask("summary")
    held = probed["held"] + sum(r.held for r in replicas)
    refused = probed["refused"] + sum(r.refused for r in replicas)
    load_rtts = [x for r in replicas for x in r.rtts]

    # Stop the load, leave the state as it is, and time each script alone.
    await probe.ask("stop")
    for replica in replicas:
        await replica.stop()
    await servers.resetstat()
    await probe.ask("beat")
    for replica in replicas:
        await replica.beat()
    heartbeat = await servers.scripts(per=opts["replicas"])
    await servers.resetstat()
    alone = (await probe.ask(f"holds {opts['isolated_holds']}"))["rtts"]
    hold = await servers.scripts(per=len(alone))

    await probe.close()
    for replica in replicas:
        await replica.shared.aclose()
    await servers.aclose()
    admissions = held + refused
    cpu, idle = sum(cpus), sum(idles)
    result = {
        "replicas": opts["replicas"],
        "engines": opts["engines"],
        "offered_per_s": opts["replicas"] * opts["rate"],
        "admissions": admissions,
        "held": held,
        "refused": refused,
        "admissions_per_s": admissions / elapsed,
        # The probe's holds: one replica in a process of its own.
        "hold_rtt_p50_ms": _ms(quantile(probed["rtts"], 0.5)),
        "hold_rtt_p99_ms": _ms(quantile(probed["rtts"], 0.99)),
        "probe_holds": len(probed["rtts"]),
        "ping_rtt_p50_ms": _ms(quantile(probed["pings"], 0.5)),
        "ping_rtt_p99_ms": _ms(quantile(probed["pings"], 0.99)),
        # The others', on this process's one event loop.
        "load_hold_rtt_p50_ms": _ms(quantile(load_rtts, 0.5)),
        "load_hold_rtt_p99_ms": _ms(quantile(load_rtts, 0.99)),
        "scripts_under_load": under_load,
        "server_cpu_s": cpu,
        "server_idle_cpu_share": idle,
        # Net of what Redis spends idle.
        "server_cpu_usec_per_admission": _net(cpu, idle, elapsed, admissions),
        "server_cpu_share": cpu / elapsed,
        "load_cpu_share": client_cpu / elapsed,
        "hold_alone": hold,
        "hold_alone_rtt_p50_ms": _ms(quantile(alone, 0.5)),
        "hold_alone_rtt_p99_ms": _ms(quantile(alone, 0.99)),
        "heartbeat_alone": heartbeat,
    }
    if servers.serves is not None:
        # Each shard runs its scripts on one core of its own: the busiest
        # is the one that limits the cluster.
        shards = [
            {
                "node": node,
                "serves": serves,
                "cpu_usec_per_admission": _net(c, i, elapsed, admissions),
                "cpu_share": c / elapsed,
                "idle_cpu_share": i,
            }
            for node, serves, c, i in zip(servers.nodes, servers.serves, cpus, idles, strict=True)
        ]
        result["shards"] = shards
        result["busiest_shard"] = max(shards, key=lambda s: s["cpu_usec_per_admission"])
    return result


def _net(cpu: float, idle: float, elapsed: float, admissions: int) -> float:
    """CPU µs per admission, net of what Redis spends idle."""
    return max(0.0, cpu - idle * elapsed) / max(1, admissions) * 1e6


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def main() -> None:
    opts = json.loads(sys.argv[1])
    # The event loop the gateway runs on (uvicorn takes uvloop when installed).
    if opts.get("role") == "probe":
        uvloop.run(probe_main(opts["url"], opts))
        return
    result = uvloop.run(run_fleet(opts["url"], opts))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
