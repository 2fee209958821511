"""What the benchmark starts: its engines (each kept while a part needs it)
and, for every run through a gateway, a fresh gateway — nothing learned and
nothing booked from the run before, so the rotated order of the targets
cannot leak one run into the next. Laid out as ``make up`` lays out its
stack: the engines on the launcher's cores, the gateways (and this process,
the client) pinned to the cores the engines leave."""

import argparse
import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.classes.requests import body
from benchmarks.classes.targets import EngineKind, Target, gateway_settings
from benchmarks.harness import Client, Processes, Service, engine_idle, model_name, wait_ready
from deploy.local import free_port
from deploy.stack import gateway_cpus, parse_cpus

PREEMPTIONS = "vllm:num_preemptions_total"
GENERATED = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
REJECTIONS = "gateway_rejections_total"
# Being built beside this benchmark: read when the gateway has it, "-" when not.
EVICTIONS = "gateway_evictions_total"
ENGINE_SERIES = (RUNNING, WAITING, KV_USAGE)
COUNTERS = (PREEMPTIONS, GENERATED, REJECTIONS, EVICTIONS)


@dataclass(frozen=True)
class EngineSize:
    kv_blocks: int | None
    max_num_seqs: int
    scheduling: str


@dataclass(frozen=True)
class Serving:
    """Where one run sends its requests, the engine behind, and the
    gateway's admin port (None for vLLM direct)."""

    url: str
    engine: Service
    max_num_seqs: int
    admin: str | None
    # The gateway's process (its CPU is read around the load).
    gateway_pid: int | None = None
    # The gateway itself (its access log is read after the load).
    gateway: Service | None = None


def sizes(args: argparse.Namespace) -> dict[EngineKind, EngineSize]:
    return {
        "priority": EngineSize(args.kv_blocks, args.max_num_seqs, "priority"),
        "fcfs": EngineSize(args.kv_blocks, args.max_num_seqs, "fcfs"),
        "eviction": EngineSize(args.eviction_kv_blocks, args.eviction_seqs, "priority"),
    }


def engine_cpus() -> str:
    """The engines' cores: ``ENGINE_CPUS``, or what the launcher takes
    unless told (every core this process may use but the last)."""
    cores = sorted(os.sched_getaffinity(0))
    engines = cores[:-1] or cores
    default = str(engines[0]) if len(engines) == 1 else f"{engines[0]}-{engines[-1]}"
    return os.environ.get("ENGINE_CPUS") or default


class ClassesStack:
    def __init__(self, args: argparse.Namespace, procs: Processes) -> None:
        self.args = args
        self.procs = procs
        self.model = model_name()
        self.sizes = sizes(args)
        self.engines: dict[EngineKind, Service] = {}
        self._affinity: set[int] | None = None
        self.engine_cpus = engine_cpus()
        self.client_cpus: str | None = None

    def pin(self) -> None:
        """This process (the client) and the gateways it starts on the cores
        the engine launcher leaves, as ``make up`` pins its gateways. The
        engines are started with their cores named: the launcher counts the
        cores it may use, and would count only the client's."""
        cpus = gateway_cpus({"ENGINE_CPUS": self.engine_cpus}, os.sched_getaffinity(0))
        if cpus:
            self._affinity = os.sched_getaffinity(0)
            os.sched_setaffinity(0, parse_cpus(cpus))
            self.client_cpus = cpus

    def unpin(self) -> None:
        if self._affinity is not None:
            os.sched_setaffinity(0, self._affinity)
            self._affinity = None

    async def engines_for(self, kinds: set[EngineKind]) -> None:
        """Exactly the engines ``kinds`` names running (one left idle would
        share the engines' cores with the measured one), each warmed up once
        started."""
        for kind in [k for k in self.engines if k not in kinds]:
            self.procs.stop(self.engines.pop(kind))
        # One after another: engines of one model and size compile into the
        # same cache entry, and one started beside another would race it.
        for kind in sorted(kinds - set(self.engines)):
            size = self.sizes[kind]
            engine = self.procs.engine(
                f"engine-{kind}",
                kv_blocks=size.kv_blocks,
                max_num_seqs=size.max_num_seqs,
                cpus=self.engine_cpus,
                # make up's engines publish their KV cache events; its
                # gateways read them. The fcfs engine serves direct only.
                kv_events=kind != "fcfs",
                env={"ENGINE_SCHEDULING_POLICY": size.scheduling},
            )
            self.engines[kind] = engine
            wait_ready([engine])
            await self.warm_up(engine)

    async def warm_up(self, engine: Service) -> None:
        """The engine's first requests compile and allocate: a few before
        anything is measured."""
        warm = body(self.model, [{"role": "user", "content": "warm up"}], 16)
        async with Client(engine.url) as client:
            for _ in range(2):
                await asyncio.gather(*(client.stream(warm) for _ in range(8)))
            await engine_idle(client, engine.url)

    @contextlib.asynccontextmanager
    async def serving(self, t: Target, run: str) -> AsyncIterator[Serving]:
        """The target ready to take requests: its engine, and a fresh
        gateway in front when it has one (stopped when the run ends; its
        log kept as ``gateway-<run>.log``)."""
        engine = self.engines[t.engine]
        seqs = self.sizes[t.engine].max_num_seqs
        if t.direct:
            yield Serving(engine.url, engine, seqs, None)
            return
        admin_port = free_port()
        settings = gateway_settings(t, engine.url, seqs, admin_port)
        # The run's own settings for every gateway (``--gateway-env``).
        settings.update(kv.split("=", 1) for kv in self.args.gateway_env)
        gateway = self.procs.gateway(f"gateway-{run}", settings, Path(self.args.gateway_src))
        try:
            wait_ready([gateway], timeout=120)
            admin = f"http://127.0.0.1:{admin_port}"
            yield Serving(gateway.url, engine, seqs, admin, gateway.pid, gateway)
        finally:
            self.procs.stop(gateway)

    def stop(self) -> None:
        for kind in list(self.engines):
            self.procs.stop(self.engines.pop(kind))
        self.unpin()
