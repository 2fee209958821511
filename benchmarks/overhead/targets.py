"""What the overhead benchmark measures against: one engine laid out on the
cores as asked, and in front of it vLLM's own router and two gateways
(admission off and on); each target's URL and the CPU of the process that
relays for it."""

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    Bench,
    Processes,
    Service,
    cpu_seconds,
    own_cpu,
    tree_cpu,
    tree_kernel_cpu,
    wait_ready,
)
from deploy.local import ROOT
from deploy.stack import gateway_cpus, parse_cpus
from loadtests.prompts import PromptFactory

TARGETS = [
    "direct",
    "again",
    "router",
    "nginx",
    "bare",
    "off",
    "on",
    "before",
    "traced",
    "tokenizer",
    "estimate",
    "makeup",
    "nopace",
]
NAMES = {
    "direct": "vLLM direct",
    # vLLM direct once more in every round, paired with the first like any
    # relay: how far two cells of the same target differ in one round (the
    # noise band a relay's ratio to direct is read against).
    "again": "vLLM direct, again",
    "router": "vllm-router",
    # The floor of a relay's cost: one nginx worker, nothing buffered.
    "nginx": "nginx",
    # The floor of a relay on the gateway's own stack (uvicorn and aiohttp,
    # one read and one send per event, nothing else): benchmarks/overhead/bare_relay.py.
    "bare": "bare Python relay",
    "off": "gateway, admission off",
    "on": "gateway, admission on",
    # ``--before-src``: an older gateway, admission on, in the same run.
    "before": "gateway before, adm. on",
    # Admission on, every request traced into the local trace backend.
    "traced": "gateway, adm. on, traced",
    # Admission on, prompts counted by the gateway's copy of the tokenizer
    # (``on`` asks the engine's /tokenize, the default), or estimated.
    "tokenizer": "gateway, adm. on, own tokenizer",
    "estimate": "gateway, adm. on, estimated",
    # As `make up` configures it: the model's tokenizer files, the sequence
    # cap set to the engine's --max-num-seqs.
    "makeup": "gateway as `make up` sets it",
    # As `make up` sets it, without paced starts (what they buy, measured apart).
    "nopace": "make up's, no paced starts",
}
# What a run compares unless told: the anchors (vLLM direct, its router,
# nginx as the floor of a relay's cost) and the gateway as `make up` runs it.
DEFAULT_TARGETS = ("direct", "router", "nginx", "makeup")
# The targets that are vLLM itself, no relay in front.
DIRECT = frozenset({"direct", "again"})
LAYOUTS = ("unpinned", "pinned")
# As `make up` sets its gateways (deploy/stack.py): the model's tokenizer
# files, and the engines, which it starts, ordering by priority.
MAKE_UP = {
    "GATEWAY_TOKENIZER_DIR": str(ROOT / os.environ.get("ENGINE_MODEL_DIR", ".models/tiny")),
    "GATEWAY_ENGINE_SCHEDULING": "priority",
}
GATEWAYS = {
    "off": {"GATEWAY_ADMISSION": "off"},
    # Prompts counted by the engine's /tokenize (what ``auto``, the
    # default, comes to without tokenizer files).
    "on": {"GATEWAY_PROMPT_TOKENS": "engine"},
    "before": {},
    "traced": {},
    "tokenizer": {
        "GATEWAY_TOKENIZER_DIR": str(ROOT / os.environ.get("ENGINE_MODEL_DIR", ".models/tiny")),
    },
    "estimate": {"GATEWAY_PROMPT_TOKENS": "estimate"},
    "makeup": MAKE_UP,
    "nopace": {**MAKE_UP, "GATEWAY_PACED_STARTS": "false"},
}
# The targets run as `make up` runs its gateways (the engine's sequence cap too).
MAKE_UP_LIKE = {"makeup", "nopace"}


def add_variant(spec: str) -> str:
    """A target of its own: `make up`'s gateway with some settings changed,
    ``NAME:GATEWAY_X=1,GATEWAY_Y=2`` (``--variant``, before the targets are
    read). Returns its name."""
    name, _, settings = spec.partition(":")
    changed = dict(kv.split("=", 1) for kv in settings.split(",") if kv)
    if not name or not changed or name in NAMES:
        raise SystemExit(f"--variant {spec!r}: NAME:GATEWAY_X=value,... with a new NAME")
    TARGETS.append(name)
    NAMES[name] = "make up's, " + ", ".join(
        f"{k.removeprefix('GATEWAY_')}={v}" for k, v in changed.items()
    )
    GATEWAYS[name] = {**MAKE_UP, **changed}
    MAKE_UP_LIKE.add(name)
    return name


def engine_cpus(layout: str) -> str:
    """The engine launcher's ``ENGINE_CPUS`` for a layout: *pinned* as
    ``make up`` pins it (every core but the last, which the proxies and the
    client then have to themselves), *unpinned* on every core, shared with
    them."""
    last = (os.cpu_count() or 2) - 1
    if layout == "pinned":
        return "0" if last <= 1 else f"0-{last - 1}"
    return f"0-{last}"


def relay_cpus(layout: str) -> set[int] | None:
    """Where the client and every relay run: *pinned*, the cores ``make
    up`` leaves its gateways (``deploy.stack.gateway_cpus``), so that
    neither the client, which stands for users elsewhere, nor a relay takes
    the engine's; *unpinned*, where the scheduler puts them (None)."""
    if layout != "pinned":
        return None
    cpus = gateway_cpus({"ENGINE_CPUS": engine_cpus(layout)}, os.sched_getaffinity(0))
    return parse_cpus(cpus) if cpus else None


def layout_note(layout: str) -> str:
    cpus = engine_cpus(layout)
    if layout == "pinned":
        return (
            f"engine pinned to CPU {cpus} (as `make up`), proxies and client pinned to the rest"
            " (as `make up` pins the gateways)"
        )
    return f"not pinned: engine, proxies and client share CPUs {cpus}"


# Settings that name a file or directory.
PATH_SETTINGS = ("GATEWAY_TOKENIZER_DIR", "GATEWAY_KEYS_FILE")


def resolved_paths(env: dict[str, str], cwd: Path) -> dict[str, str]:
    """``env`` with each path setting made absolute against ``cwd`` (where
    the benchmark runs). A gateway runs in its own source directory
    (``--gateway-src``, ``--before-src``), where a relative path names
    something else or nothing: a gateway without its tokenizer files counts
    prompts by the engine, and would be measured as another gateway. A path
    that does not exist stops the run."""
    resolved = dict(env)
    for name in PATH_SETTINGS:
        if name in env:
            path = cwd / env[name]
            if not path.exists():
                raise SystemExit(f"{name}={env[name]}: {path} does not exist")
            resolved[name] = str(path)
    return resolved


@dataclass
class CpuSnapshot:
    """CPU seconds so far (utime + stime from /proc) of the process that
    relays for a target (None for vLLM direct) and the kernel's part of
    them (stime), of vLLM's API server and of this process (the client)."""

    proxy: float | None
    engine_api: float
    client: float
    proxy_kernel: float | None = None


class OverheadBench(Bench):
    """One engine and, in front of it, vllm-router and two gateways."""

    def __init__(self, args: argparse.Namespace, procs: Processes, layout: str) -> None:
        super().__init__(procs)
        self.args = args
        self.layout = layout
        self.targets: list[str] = list(args.targets)
        self.proxies: dict[str, Service] = {}
        self.backend: Service | None = None
        self.prompts = PromptFactory(seed=args.seed)
        self._traces: dict[str, str] = {}
        self._affinity: set[int] | None = None

    def start(self) -> None:
        args = self.args
        relays = relay_cpus(self.layout)
        if relays:
            # This process (the client) and all it starts from now on; the
            # engine's launcher pins the engine to its own cores.
            self._affinity = os.sched_getaffinity(0)
            os.sched_setaffinity(0, relays)
        self.engines = [
            self.procs.engine(
                f"engine-{self.layout}",
                kv_space_gib=args.kv_space_gib,
                kv_blocks=args.kv_blocks,
                max_num_seqs=args.max_num_seqs,
                cpus=engine_cpus(self.layout),
            )
        ]
        wait_ready(self.engines)
        traces: dict[str, str] = {}
        if "traced" in self.targets:
            backend = self.procs.trace_backend(f"traces-{self.layout}")
            wait_ready([backend], timeout=300)
            self.backend = backend
            # The SDK's defaults otherwise: every request sampled, batches of
            # up to 512 spans every 5 s.
            traces = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{backend.url}/v1/traces"}
        self._traces = traces
        for target in GATEWAYS:
            if target in self.targets:
                self.proxies[target] = self._gateway(target)
        if "router" in self.targets:
            self.proxies["router"] = self.procs.router(
                f"router-{self.layout}", [self.engine.url], args.router_args.split()
            )
        if "nginx" in self.targets:
            self.proxies["nginx"] = self.procs.nginx(f"nginx-{self.layout}", self.engine.url)
        if "bare" in self.targets:
            self.proxies["bare"] = self.procs.bare_relay(f"bare-{self.layout}", self.engine.url)
        wait_ready(self.proxies.values(), timeout=120)

    def _gateway(self, target: str) -> Service:
        args = self.args
        env = GATEWAYS[target]
        if target == "traced":
            env = {**env, **self._traces}
        if target in MAKE_UP_LIKE:
            env = {**env, "GATEWAY_MAX_CONCURRENCY": str(args.max_num_seqs)}
        extra = dict(kv.split("=", 1) for kv in args.gateway_env)
        src = args.before_src if target == "before" else args.gateway_src
        return self.procs.gateway(
            f"gateway-{target}-{self.layout}",
            resolved_paths({"GATEWAY_UPSTREAM_URL": self.engine.url, **env, **extra}, Path.cwd()),
            Path(src),
        )

    def restart(self, target: str) -> None:
        """A fresh gateway for ``target`` (nothing learned, nothing booked)."""
        self.procs.stop(self.proxies[target])
        self.proxies[target] = self._gateway(target)
        wait_ready([self.proxies[target]], timeout=120)

    def stop(self) -> None:
        """Stop this layout's processes (the next layout starts its own)."""
        backend = [self.backend] if self.backend is not None else []
        for service in [*self.proxies.values(), *self.engines, *backend]:
            self.procs.stop(service)
        if self._affinity is not None:
            os.sched_setaffinity(0, self._affinity)
            self._affinity = None

    def url(self, target: str) -> str:
        return self.engine.url if target in DIRECT else self.proxies[target].url

    def body(self, max_tokens: int) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": self.prompts.chat(),
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }

    def cpu(self, target: str) -> CpuSnapshot:
        proxy = self.proxies.get(target)
        # The launcher execs the API server: its own process, not the engine
        # core and workers under it.
        api = cpu_seconds([self.engine.pid]).get(self.engine.pid, 0.0)
        if proxy is None:
            return CpuSnapshot(None, api, own_cpu())
        return CpuSnapshot(tree_cpu(proxy.pid), api, own_cpu(), tree_kernel_cpu(proxy.pid))
