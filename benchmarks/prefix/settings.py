"""What the prefix benchmark compares: each setting a gateway or a vllm-router
over the same two engines."""

from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import Processes, Service
from benchmarks.harness.processes import KV_EVENTS
from deploy.stack import KV_EVENTS_OFFSET

BLOCK_SIZE = 128


@dataclass(frozen=True)
class Setting:
    name: str
    # The gateway's GATEWAY_ROUTING, or vllm-router's --policy.
    routing: str
    aware: bool = True
    kv_events: bool = False
    router: bool = False
    # GATEWAY_ROUTING_AFFINITY_WAIT (None: the gateway's default).
    affinity_wait: float | None = None
    # GATEWAY_ROUTING_SCORERS (None: the preset ``routing`` names).
    scorers: str | None = None
    # GATEWAY_ROUTING_AFFINITY_STEAL (None: the gateway's default).
    steal: str | None = None
    # GATEWAY_ROUTING_LOAD_FACTOR (None: the gateway's default).
    load_factor: float | None = None
    # GATEWAY_ROUTING_PLACEMENT (None: the gateway's default).
    placement: str | None = None
    # GATEWAY_ROUTING_HELD_LOAD_FACTOR (None: the gateway's default).
    held_load_factor: float | None = None

    @property
    def slug(self) -> str:
        return self.name.replace(",", "").replace(" ", "-")


LEAST = Setting("least_loaded", "least_loaded")
LEAST_PLAIN = Setting("least_loaded, prefix-aware demand off", "least_loaded", aware=False)
KEY = Setting("prefix key", "prefix")
KEY_PLAIN = Setting("prefix key, prefix-aware demand off", "prefix", aware=False)
EVENTS = Setting("prefix, KV events", "prefix", kv_events=True)
EVENTS_WAIT = Setting("prefix, KV events, wait 1 s", "prefix", kv_events=True, affinity_wait=1.0)
EVENTS_WAIT_LONG = Setting(
    "prefix, KV events, wait 10 s", "prefix", kv_events=True, affinity_wait=10.0
)
EVENTS_WAIT_IDLE = Setting(
    "prefix, KV events, wait 10 s, idle only",
    "prefix",
    kv_events=True,
    affinity_wait=10.0,
    steal="idle",
)
EVENTS_BY_KEY = Setting(
    "prefix, KV events, wait 10 s, idle only, placed by key",
    "prefix",
    kv_events=True,
    affinity_wait=10.0,
    steal="idle",
    placement="key",
)


def _by_load(suffix: str = "", **overrides: float) -> Setting:
    """Placed by load (the defaults of routing on KV events, named), with
    ``overrides`` of the load cap's settings."""
    return Setting(
        "prefix, KV events, wait 10 s, idle only, placed by load" + suffix,
        "prefix",
        kv_events=True,
        affinity_wait=10.0,
        steal="idle",
        placement="least_loaded",
        **overrides,  # type: ignore[arg-type]
    )


EVENTS_BY_LOAD = _by_load()
EVENTS_BY_LOAD_15 = _by_load(", load factor 1.5", load_factor=1.5)
EVENTS_BY_LOAD_2 = _by_load(", load factor 2", load_factor=2.0)
# The behaviour before the held bound: every prefix held to the load cap.
EVENTS_BY_LOAD_HELD_125 = _by_load(", held bound 1.25", held_load_factor=1.25)
EVENTS_FACTOR_15 = Setting(
    "prefix, KV events, load factor 1.5", "prefix", kv_events=True, load_factor=1.5
)
EVENTS_FACTOR_2 = Setting(
    "prefix, KV events, load factor 2", "prefix", kv_events=True, load_factor=2.0
)
EVENTS_QUEUE = Setting(
    "prefix + in_flight 0.5, KV events", "prefix", kv_events=True, scorers="prefix=1,in_flight=0.5"
)
ROUTER_CACHE = Setting("vllm-router cache_aware", "cache_aware", router=True)
ROUTER_KV = Setting("vllm-router kv_aware", "kv_aware", router=True)

RAG = [
    LEAST,
    LEAST_PLAIN,
    KEY,
    KEY_PLAIN,
    EVENTS,
    EVENTS_WAIT,
    EVENTS_WAIT_LONG,
    EVENTS_WAIT_IDLE,
    EVENTS_BY_KEY,
    EVENTS_BY_LOAD,
    EVENTS_BY_LOAD_15,
    EVENTS_BY_LOAD_2,
    EVENTS_BY_LOAD_HELD_125,
    EVENTS_FACTOR_15,
    EVENTS_FACTOR_2,
    EVENTS_QUEUE,
    ROUTER_CACHE,
    ROUTER_KV,
]
SKEWED = [
    KEY,
    LEAST,
    EVENTS,
    EVENTS_WAIT,
    EVENTS_WAIT_LONG,
    EVENTS_WAIT_IDLE,
    EVENTS_BY_KEY,
    EVENTS_BY_LOAD,
    EVENTS_BY_LOAD_15,
    EVENTS_BY_LOAD_2,
    EVENTS_BY_LOAD_HELD_125,
    EVENTS_FACTOR_15,
    EVENTS_FACTOR_2,
    EVENTS_QUEUE,
    ROUTER_CACHE,
    ROUTER_KV,
]
ALL = {s.name: s for s in RAG + SKEWED}


def start(
    procs: Processes, setting: Setting, engines: list[Service], model: str, gateway_src: Path
) -> Service:
    """The gateway or vllm-router of ``setting`` in front of ``engines``."""
    urls = [e.url for e in engines]
    if setting.router:
        return procs.router(f"router-{setting.slug}", urls, router_args(setting, engines, model))
    env = {
        "GATEWAY_UPSTREAM_URLS": ",".join(urls),
        "GATEWAY_ROUTING": setting.routing,
        "GATEWAY_PREFIX_AWARE_DEMAND": "true" if setting.aware else "false",
        "GATEWAY_LOG_LEVEL": "info",
        **(KV_EVENTS if setting.kv_events else {}),
    }
    if setting.affinity_wait is not None:
        env["GATEWAY_ROUTING_AFFINITY_WAIT"] = str(setting.affinity_wait)
    if setting.scorers is not None:
        env["GATEWAY_ROUTING_SCORERS"] = setting.scorers
    if setting.steal is not None:
        env["GATEWAY_ROUTING_AFFINITY_STEAL"] = setting.steal
    if setting.load_factor is not None:
        env["GATEWAY_ROUTING_LOAD_FACTOR"] = str(setting.load_factor)
    if setting.placement is not None:
        env["GATEWAY_ROUTING_PLACEMENT"] = setting.placement
    if setting.held_load_factor is not None:
        env["GATEWAY_ROUTING_HELD_LOAD_FACTOR"] = str(setting.held_load_factor)
    return procs.gateway(f"gateway-{setting.slug}", env, gateway_src)


def router_args(setting: Setting, engines: list[Service], model: str) -> list[str]:
    args = ["--policy", setting.routing]
    if setting.routing == "kv_aware":
        for engine in engines:
            port = int(engine.url.rsplit(":", 1)[1]) + KV_EVENTS_OFFSET
            args += ["--kv-event-source", f"{engine.url}=tcp://127.0.0.1:{port}"]
            args += ["--kv-event-replay-source", f"{engine.url}=tcp://127.0.0.1:{port + 1}"]
        args += ["--kv-event-block-size", str(BLOCK_SIZE), "--kv-event-model", model]
    return args
