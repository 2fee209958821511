"""One measured run of a part against one target: a fresh gateway when the
target has one, the engine idle before and after, the engine's running
sequences and KV use sampled every second, the engine's and the gateway's
counters read around it; then what it comes to, as a row of the results."""

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from app.observe.promtext import present
from benchmarks.classes.outcomes import run_figures
from benchmarks.classes.stack import (
    COUNTERS,
    ENGINE_SERIES,
    EVICTIONS,
    KV_USAGE,
    PREEMPTIONS,
    REJECTIONS,
    RUNNING,
    WAITING,
    ClassesStack,
    Serving,
)
from benchmarks.classes.targets import Target
from benchmarks.harness import Call, Client, Window, measured, own_cpu, tree_cpu

# A part's load: given the client and the time it starts (``time.perf_counter``),
# every request it sent.
Load = Callable[[Client, Serving, float], Awaitable[list[Call]]]


@dataclass
class Measured:
    calls: list[Call]
    t0: float
    window: Window
    serving: Serving
    # Cores the client (this process) and the gateway used while the load
    # ran: on a small machine they share a core, and a relay short of CPU
    # shows in its first tokens.
    cores: dict[str, float | None]
    # Whether the gateway exports its evictions at all (None: no gateway);
    # a series with no eviction yet has no sample but has its HELP line.
    evictions_exported: bool | None = None


async def measure(stack: ClassesStack, t: Target, run: str, load: Load) -> Measured:
    async with stack.serving(t, run) as serving, Client(serving.url) as client:
        engine = serving.engine.url
        targets = {"engine": engine} | ({"gateway": serving.admin} if serving.admin else {})
        async with measured(
            client,
            targets,
            COUNTERS,
            idle=[engine],
            sampled={"engine": engine},
            series=ENGINE_SERIES,
        ) as window:
            cpu = Cpu(serving.gateway_pid)
            calls = await load(client, serving, window.started)
            cores = cpu.cores()
        exported = None
        if serving.admin:
            async with client.session.get(f"{serving.admin}/metrics") as resp:
                exported = f" {EVICTIONS} " in await resp.text()
    return Measured(calls, window.started, window, serving, cores, exported)


class Cpu:
    """CPU seconds of the client and of the gateway's process tree, from a
    start to when ``cores`` is called, as cores used on average."""

    def __init__(self, gateway_pid: int | None) -> None:
        self.pid = gateway_pid
        self.started = time.perf_counter()
        self.client = own_cpu()
        self.gateway = tree_cpu(gateway_pid) if gateway_pid else None

    def cores(self) -> dict[str, float | None]:
        seconds = time.perf_counter() - self.started
        client = (own_cpu() - self.client) / seconds
        gateway = None
        if self.pid and self.gateway is not None:
            gateway = (tree_cpu(self.pid) - self.gateway) / seconds
        return {
            "client": round(client, 3),
            "gateway": None if gateway is None else round(gateway, 3),
        }


def engine_states(m: Measured) -> list[tuple[float, float, float]]:
    """The engine's sampled state: (seconds after the start, running
    sequences, share of its KV cache in use)."""
    sampler = m.window.sampler
    if sampler is None:
        return []
    rows = [(at, samples) for at, name, samples in sampler.rows if name == "engine"]
    states = []
    for at, samples in rows:
        running = sum(s.value for s in samples if s.name == RUNNING)
        kv = sum(s.value for s in samples if s.name == KV_USAGE)
        states.append((at - m.t0, running, kv))
    return states


def engine_load(m: Measured) -> dict[str, float | None]:
    """What the engine ran and held while the load ran (sampled each
    second): running and waiting requests, the share of its KV cache in
    use, each as its mean and its maximum."""
    out: dict[str, float | None] = {}
    for key, name in (("running", RUNNING), ("waiting", WAITING), ("kv", KV_USAGE)):
        values = m.window.series("engine", name)
        out[f"{key}_mean"] = sum(values) / len(values) if values else None
        out[f"{key}_max"] = max(values) if values else None
    return out


def gateway_counts(m: Measured) -> dict[str, Any]:
    """What the gateway counted in the run: its refusals by reason and, when
    it reports them, its evictions by outcome (None: it does not)."""
    if "gateway" not in m.window.after:
        return {"rejections": None, "evictions": None}
    rejections = {k: v for k, v in m.window.delta_by(REJECTIONS, "reason", "gateway").items() if v}
    evictions = None
    if m.evictions_exported or present(m.window.after["gateway"], EVICTIONS):
        evictions = m.window.delta_by(EVICTIONS, "outcome", "gateway")
    return {"rejections": rejections, "evictions": evictions}


def row(
    m: Measured, objectives: Mapping[str, float], load_s: float, window_s: float
) -> dict[str, Any]:
    """The run as its part's results keep it: each kind's figures and the
    total, the engine's preemptions, the gateway's counts."""
    figures = run_figures(m.calls, objectives, m.t0, load_s, window_s)
    return {
        "kinds": {label: f.as_dict() for label, f in figures.items()},
        "preemptions": m.window.delta(PREEMPTIONS, "engine"),
        "engine": engine_load(m),
        "cores": m.cores,
        **gateway_counts(m),
        "others_cores": round(m.window.others_cores, 3),
    }
